"""
`task: classification`: a sequence classifier trained with `ConstrainedTrainer` (its own head, the paper's shared
linear readout, or the paper's unrolled transformer).

    constrained-sft train --config recipes/minilm/rotten-tomatoes/constrained.yaml

Recipe keys are exactly the fields of `ClassifierScriptArguments`, TRL's `ModelConfig` and `ConstrainedConfig`.
Held-out scores are per example (top-1 hit, cross-entropy); the headline is accuracy.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, DataCollatorWithPadding, TrainingArguments
from trl import ModelConfig, get_peft_config

from ..config import ConstrainedConfig
from ..data import (
    ClassificationDataArguments,
    has_classification_head,
    load_classification,
    load_pretrained,
    load_tokenizer,
    load_train_validation,
    resolve_model_path,
)
from ..models import (
    ARCHITECTURES,
    POOLINGS,
    READOUTS,
)
from ..trainers import ConstrainedTrainer
from ..utils.types import Kwargs
from .base import (
    Arm,
    Headline,
    Measure,
    Measuring,
    Recipe,
    Searching,
    Task,
    TrainedModel,
    Training,
    measure_only,
    ratio,
    require_model,
)
from .training import check_run, train_and_report

NAME = "classification"


@dataclass
class ClassifierScriptArguments(ClassificationDataArguments):
    task: str = field(
        default=NAME,
        metadata={"help": "The recipe's task: 'classification' (this recipe kind).", "choices": [NAME]},
    )
    evaluate_before_training: bool = field(
        default=False, metadata={"help": "Evaluate the held-out split before training too."}
    )
    classifier_readout: str = field(
        default="head",
        metadata={
            "help": "The shared readout psi of every layer: 'head' (the model's own pooler / classification head) or "
            "'linear' (the paper's: one linear layer on the pooled token, saved with the model).",
            "choices": list(READOUTS),  # the registry's names: `models.classifiers`
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
        super().__post_init__()
        for name, allowed in (
            ("classifier_readout", READOUTS),
            ("classifier_pooling", POOLINGS),
            ("classifier_architecture", ARCHITECTURES),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"`{name}` must be one of {list(allowed)}, got {getattr(self, name)!r}.")
        if not isinstance(self.ut_layers, int) or self.ut_layers < 1:
            raise ValueError(f"`ut_layers` must be an integer >= 1, got {self.ut_layers!r}.")
        for kind in (ARCHITECTURES[self.classifier_architecture], READOUTS[self.classifier_readout]):
            if problem := kind.problem(self):
                raise ValueError(problem)


# what this task's recipe parses into: its own fields, TRL's model fields (or none), the trainer config
ClassifierRecipe = Recipe[ClassifierScriptArguments, ConstrainedConfig]


def build_classifier(path: str, config, names: list[str], recipe, **kwargs):
    """A sequence classifier to train, by the recipe's architecture, then readout (`models.classifiers`): a kind that
    builds a new model from the encoder at `path` does (a model saved as one reloads as it is); else the model as it
    is, its own head, or (a plain encoder, `config` without one) a new head with the dataset's classes `names`.
    `recipe`: the classifier fields (duck-typed); `kwargs` (revision, dtype) go to `from_pretrained`."""
    labels: Kwargs = {  # config fields handed on to `from_pretrained`
        "num_labels": len(names),
        "id2label": dict(enumerate(names)),
        "label2id": {n: i for i, n in enumerate(names)},
    }
    for kind in (ARCHITECTURES[recipe.classifier_architecture], READOUTS[recipe.classifier_readout]):
        if kind.build is not None and kind.builds(config):
            return kind.build(path, labels, recipe, kwargs)
    if has_classification_head(config):
        return AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
    return AutoModelForSequenceClassification.from_pretrained(path, **labels, **kwargs)


@dataclass
class ClassifierSweepData:
    """What every trial of a classifier sweep shares: the tokenized train / validation rows and the model source."""

    recipe: ClassifierScriptArguments
    path: str
    config: Any
    tokenizer: Any
    names: list[str]
    train: Any
    validation: Any
    dtype: Any


class ClassificationTraining(Training[ClassifierRecipe]):
    """`task: classification`: a sequence classifier (its head, the shared linear readout or the UT) trained by
    `ConstrainedTrainer`."""

    def train(self, recipe: ClassifierRecipe, more_runs: bool = False) -> TrainedModel:
        script, model_args = recipe.script, recipe.model_config()
        require_model(model_args.model_name_or_path)
        path = resolve_model_path(model_args.model_name_or_path)
        identity = check_run(recipe, path)  # before any work
        tokenizer = load_tokenizer(path, model_args.model_revision)
        config = AutoConfig.from_pretrained(path, revision=model_args.model_revision)
        num_labels = config.num_labels if has_classification_head(config) else None
        train_ds, eval_ds, names = load_classification(script, tokenizer, num_labels)
        model = build_classifier(
            path, config, names, script, revision=model_args.model_revision, dtype=model_args.dtype
        )
        peft_config = get_peft_config(model_args)
        if peft_config is not None:
            from peft import get_peft_model

            peft_config.task_type = "SEQ_CLS"
            model = get_peft_model(model, peft_config)
        trainer = ConstrainedTrainer(
            model=model,
            args=recipe.training,
            train_dataset=train_ds,
            eval_dataset=eval_ds,
            processing_class=tokenizer,
            data_collator=DataCollatorWithPadding(tokenizer),
        )
        trainer.run_identity = identity  # with the data it trains on
        return train_and_report(trainer, script.evaluate_before_training, accuracy_key="accuracy", end=not more_runs)


class ClassificationMeasuring(Measuring):
    """A saved classifier on the held-out split: per-example hits and cross-entropy, accuracy."""

    def load_model(self, spec, dtype):
        return load_pretrained(spec, AutoModelForSequenceClassification, dtype)

    def evaluation_data(
        self, data_args: ClassificationDataArguments, data_dir: str | None = None
    ) -> ClassificationDataArguments:
        """The data fields: each model tokenizes the held-out rows with its own tokenizer (`measuring_trainer`)."""
        return data_args

    def describe(self, data, data_args: ClassificationDataArguments) -> str:
        split = data_args.dataset_test_split or f"{data_args.eval_size} carved"
        return f"held-out rows of {data_args.dataset_name} ({split}); noise on every token embedding"

    def measuring_trainer(self, model, tokenizer, data, measure: Measure) -> ConstrainedTrainer:
        """Tokenized with the model's own tokenizer; labels checked against its head."""
        _, rows, _ = load_classification(data, tokenizer, model.config.num_labels)
        return ConstrainedTrainer(
            model=model,
            args=ConstrainedConfig(**measure_only(measure)),
            eval_dataset=rows,
            processing_class=tokenizer,
            data_collator=DataCollatorWithPadding(tokenizer),
        )

    def metric(self, sums: dict[str, np.ndarray]) -> np.ndarray:
        return ratio(sums["correct"], sums["count"])


class ClassificationSearching(Searching[ClassifierRecipe]):
    """A sweep of classifier recipes: one arm per readout, the same tokenized rows for every trial."""

    def recipe_readout(self, recipe: ClassifierRecipe) -> str:
        return recipe.script.classifier_readout

    def sweep_data(self, recipe: ClassifierRecipe, validation_size: float) -> ClassifierSweepData:
        model_args = recipe.model_config()
        path = resolve_model_path(model_args.model_name_or_path)
        config = AutoConfig.from_pretrained(path, revision=model_args.model_revision)
        tokenizer = load_tokenizer(path, model_args.model_revision)
        train, validation, names = load_train_validation(recipe.script, tokenizer, None, validation_size)
        return ClassifierSweepData(recipe.script, path, config, tokenizer, names, train, validation, model_args.dtype)

    def trial_trainer(
        self, data: ClassifierSweepData, arm: Arm, args: TrainingArguments, callbacks=()
    ) -> ConstrainedTrainer:
        torch.manual_seed(args.seed)  # the new readout's initialisation follows the trial's seed
        script = data.recipe
        recipe = copy.copy(script)
        recipe.classifier_readout = arm.readout or script.classifier_readout  # the arm's readout
        model = build_classifier(data.path, data.config, data.names, recipe, dtype=data.dtype)
        return ConstrainedTrainer(
            model=model,
            args=args,
            train_dataset=data.train,
            eval_dataset=data.validation,
            processing_class=data.tokenizer,
            data_collator=DataCollatorWithPadding(data.tokenizer),
            callbacks=list(callbacks),
        )


class ClassificationTask(Task):
    name = NAME
    headline = Headline("accuracy", "accuracy (examples)", higher_is_better=True)
    data_arguments = ClassificationDataArguments
    readouts = READOUTS

    def __init__(self) -> None:
        self.training, self.measuring, self.searching = (
            ClassificationTraining(),
            ClassificationMeasuring(),
            ClassificationSearching(self),
        )

    def parser_classes(self) -> tuple[type, ...]:
        return (ClassifierScriptArguments, ModelConfig, ConstrainedConfig)

    def recipe(self, parsed: tuple) -> ClassifierRecipe:
        script, model, training = parsed
        return Recipe(script, model, training)
