"""
`constrained-sft train` for `task: classification` recipes: a sequence classifier trained with `ConstrainedTrainer`.

    constrained-sft train --config recipes/minilm/rotten-tomatoes/constrained.yaml

YAML keys are exactly the fields of `ClassifierScriptArguments`, TRL's `ModelConfig` and `ConstrainedConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import AutoConfig, DataCollatorWithPadding
from trl import ModelConfig, TrlParser, get_peft_config

from ..config import ConstrainedConfig
from ..data import (
    ClassificationDataArguments,
    has_classification_head,
    load_classification,
    load_tokenizer,
    resolve_model_path,
)
from ..evaluation import build_classifier
from ..models import ARCHITECTURES, POOLINGS, READOUTS
from ..trainers import ConstrainedTrainer
from .common import parse, train_and_report


@dataclass
class ClassifierScriptArguments(ClassificationDataArguments):
    task: str = field(
        default="classification",
        metadata={"help": "'classification' (this recipe kind).", "choices": ["classification"]},
    )
    evaluate_before_training: bool = field(
        default=False, metadata={"help": "Evaluate the held-out split before training too."}
    )
    classifier_readout: str = field(
        default="head",
        metadata={
            "help": "The shared readout psi of every layer: 'head' (the model's own pooler / classification head) or "
            "'linear' (the paper's: one linear layer on the pooled token, saved with the model).",
            "choices": list(READOUTS),
        },
    )
    classifier_pooling: str = field(
        default="cls",
        metadata={
            "help": "Pooling of the 'linear' readout: 'cls' (first token) or 'mean' (non-padding tokens).",
            "choices": list(POOLINGS),
        },
    )

    classifier_architecture: str = field(
        default="pretrained",
        metadata={
            "help": "'pretrained': the model at `model_name_or_path`; 'ut': the paper's unrolled transformer, trained "
            "from scratch on that encoder's word embeddings (`ut_layers` layers; needs `classifier_readout: linear` "
            "and `classifier_pooling: mean`, its readout).",
            "choices": list(ARCHITECTURES),
        },
    )
    ut_layers: int = field(default=3, metadata={"help": "Layers of the 'ut' architecture (the paper's: 3)."})

    def __post_init__(self):
        for name, allowed in (
            ("classifier_readout", READOUTS),
            ("classifier_pooling", POOLINGS),
            ("classifier_architecture", ARCHITECTURES),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"`{name}` must be one of {list(allowed)}, got {getattr(self, name)!r}.")
        if not isinstance(self.ut_layers, int) or self.ut_layers < 1:
            raise ValueError(f"`ut_layers` must be an integer >= 1, got {self.ut_layers!r}.")
        if self.classifier_architecture == "ut" and (self.classifier_readout, self.classifier_pooling) != (
            "linear",
            "mean",
        ):
            raise ValueError(
                "`classifier_architecture: ut` reads every layer out by its shared linear layer on the mean of the "
                "tokens: set `classifier_readout: linear` and `classifier_pooling: mean` (got "
                f"{self.classifier_readout!r}, {self.classifier_pooling!r})."
            )


def make_parser() -> TrlParser:
    return TrlParser((ClassifierScriptArguments, ModelConfig, ConstrainedConfig))


def run(script_args: ClassifierScriptArguments, model_args: ModelConfig, training_args: ConstrainedConfig) -> dict:
    path = resolve_model_path(model_args.model_name_or_path)
    tokenizer = load_tokenizer(path, model_args.model_revision)
    config = AutoConfig.from_pretrained(path, revision=model_args.model_revision)
    num_labels = config.num_labels if has_classification_head(config) else None
    train_ds, eval_ds, names = load_classification(script_args, tokenizer, num_labels)
    model = build_classifier(
        path,
        config,
        names,
        script_args.classifier_readout,
        script_args.classifier_pooling,
        script_args.classifier_architecture,
        script_args.ut_layers,
        revision=model_args.model_revision,
        dtype=model_args.dtype,
    )
    peft_config = get_peft_config(model_args)
    if peft_config is not None:
        from peft import get_peft_model

        peft_config.task_type = "SEQ_CLS"
        model = get_peft_model(model, peft_config)
    trainer = ConstrainedTrainer(
        model=model,
        args=training_args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
    )
    return train_and_report(trainer, script_args.evaluate_before_training, accuracy_key="accuracy")


def main(argv: list[str] | None = None) -> int:
    script_args, model_args, training_args = parse(make_parser(), argv)
    run(script_args, model_args, training_args)
    return 0
