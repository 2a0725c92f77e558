"""
`task: sft` (the default): supervised fine-tuning of a causal LM with `ConstrainedSFTTrainer`, the way `trl sft` does.

    constrained-sft train --config recipes/smollm2-135m/sharegpt/constrained.yaml [--max_steps 10 ...]
    accelerate launch --config_file accelerate_configs/ddp.yaml -m constrained_sft train --config <recipe>

Recipe keys are exactly the fields of `ScriptArguments`, TRL's `ModelConfig` and `ConstrainedSFTConfig`. Held-out
scores are per sequence (correct top-1 tokens, supervised tokens, summed NLL); the headline is the mean token
accuracy of the final layer, pooled over tokens: total correct / total supervised tokens.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    PretrainedConfig,
    TrainingArguments,
)
from trl import ModelConfig, SFTConfig, get_peft_config

from ..config import ConstrainedSFTConfig
from ..data import (
    DataArguments,
    ModelSpec,
    PreparedData,
    describe_split,
    has_classification_head,
    load_chat_train_validation,
    load_pretrained,
    load_train_eval,
    prepared_splits,
    resolve_model_path,
)
from ..data.models import adapter_base, is_adapter, tokenizer_source
from ..data.processors import load_processor, reads_images, vlm_processor
from ..trainers import ConstrainedSFTTrainer
from ..utils.fields import mapping_field
from ..utils.files import write_json
from ..utils.types import Kwargs
from .base import (
    Arm,
    Headline,
    Measure,
    Measuring,
    Recipe,
    Searching,
    SharedDataTraining,
    Task,
    TrainedModel,
    measure_only,
    ratio,
    require_model,
)
from .training import check_run, train_and_report

NAME = "sft"


@dataclass
class ScriptArguments(DataArguments):
    """Data source fields, plus what the `train` command does around training."""

    task: str = field(
        default=NAME,
        metadata={"help": "The recipe's task: 'sft' (causal LM fine-tuning, this recipe kind).", "choices": [NAME]},
    )
    evaluate_before_training: bool = field(
        default=False,
        metadata={"help": "Evaluate the held-out split before training too, for a before / after layer table."},
    )


# what this task's recipe parses into: its own fields, TRL's model fields (or none), the trainer config
SFTRecipe = Recipe[ScriptArguments, ConstrainedSFTConfig]


@dataclass
class SFTSweepData:
    """What every trial of an SFT sweep shares: the model source, its init kwargs, LoRA, the two row sets."""

    model_path: str
    init_kwargs: Kwargs
    peft_config: Any
    train: Any
    validation: Any
    processor: Any = None  # a VLM's (`data.vlm_processor`); None: TRL loads the model's tokenizer


def init_kwargs(model_args: ModelConfig, training_args: ConstrainedSFTConfig) -> Kwargs:
    """`model_init_kwargs` of the trainer from the recipe's model fields (the trainer loads the model by path)."""
    base = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    return {**base, **mapping_field(training_args.model_init_kwargs, "model_init_kwargs")}


class SFTTraining(SharedDataTraining[SFTRecipe]):
    """`task: sft`: a causal LM fine-tuned by `ConstrainedSFTTrainer` from the recipe's model, data and config."""

    def train(
        self, recipe: SFTRecipe, more_runs: bool = False, data_dir: str | None = None, callbacks=()
    ) -> TrainedModel:
        """`data_dir`: a folder where runs on the same data share it, read, converted and tokenized once
        (`data.prepared_splits`: a study's arms and seeds); None reads the source for this run alone. `callbacks`:
        more `TrainerCallback`s (a study's probe times its steps with one)."""
        model = recipe.model_config()
        require_model(model.model_name_or_path)
        model_path = resolve_model_path(model.model_name_or_path)
        processor = vlm_processor(
            model_path, revision=model.model_revision, trust_remote_code=recipe.training.trust_remote_code
        )
        recipe.training.model_init_kwargs = init_kwargs(model, recipe.training)
        identity = check_run(recipe, model_path)  # before any work
        if data_dir is None:
            data = PreparedData(*load_train_eval(recipe.script), None)
        else:
            data = prepared_splits(recipe.script, data_dir)
        # TRL tokenizes in the constructor: once per data, tokenizer and length
        with data.tokenizing(recipe.training.local_process_index == 0):
            trainer = ConstrainedSFTTrainer(
                model=model_path,
                args=recipe.training,
                train_dataset=data.train,
                eval_dataset=data.held_out,
                peft_config=get_peft_config(model),
                callbacks=list(callbacks),
                processing_class=processor,  # a VLM's, loaded above; None: TRL loads the tokenizer
            )
        trainer.run_identity = identity  # with the data it trains on
        main = trainer.is_world_process_zero()
        result = train_and_report(trainer, recipe.script.evaluate_before_training, end=not more_runs)
        if main:  # where the held-out rows came from, beside the model (a refused run writes nothing)
            write_json(os.path.join(trainer.output_folder, "data.json"), describe_split(recipe.script))
        return result


class SFTMeasuring(Measuring):
    """A saved causal LM on the held-out conversations: per-sequence token scores, token accuracy."""

    def load_model(self, spec, dtype):
        return load_causal_lm(spec, dtype)

    def evaluation_data(self, data_args: DataArguments, data_dir: str | None = None):
        """The held-out rows; `data_dir` as in `SFTTraining.train` (prepared once there, read from there)."""
        return load_train_eval(data_args)[1] if data_dir is None else prepared_splits(data_args, data_dir).held_out

    def describe(self, data, data_args: DataArguments) -> str:
        if "images" in (getattr(data, "column_names", None) or []):  # a VLM's: image features too (`noise_modality`)
            return f"{len(data)} held-out rows of {data_args.dataset_name} with images; noise by `noise_modality`"
        return f"{len(data)} held-out rows of {data_args.dataset_name}; noise on every token embedding"

    def measuring_trainer(self, model, tokenizer, data, measure: Measure) -> ConstrainedSFTTrainer:
        """Training's data path on the held-out rows; sequences are never packed, so a row is a scored unit."""
        args = ConstrainedSFTConfig(
            **measure_only(measure),
            max_length=measure.max_length,
            packing=False,
            padding_free=False,
            gradient_checkpointing=False,  # TRL turns it on by default; evaluation has no backward
        )
        return ConstrainedSFTTrainer(
            model=model, args=args, train_dataset=data, eval_dataset=data, processing_class=tokenizer
        )

    def metric(self, sums: dict[str, np.ndarray]) -> np.ndarray:
        return ratio(sums["correct"], sums["count"])


class SFTSearching(Searching[SFTRecipe]):
    """A sweep of SFT recipes: the training rows minus a validation carve-off, one trainer per trial."""

    def sweep_data(self, recipe: SFTRecipe, validation_size: float) -> SFTSweepData:
        train, validation = load_chat_train_validation(recipe.script, validation_size)
        model = recipe.model_config()
        path = resolve_model_path(model.model_name_or_path)
        revision, remote = model.model_revision, recipe.training.trust_remote_code
        return SFTSweepData(
            model_path=path,
            init_kwargs=init_kwargs(model, recipe.training),
            peft_config=get_peft_config(model),
            train=train,
            validation=validation,
            processor=vlm_processor(path, revision=revision, trust_remote_code=remote),
        )

    def trial_trainer(
        self, data: SFTSweepData, arm: Arm, args: TrainingArguments, callbacks=()
    ) -> ConstrainedSFTTrainer:
        if not isinstance(args, SFTConfig):  # what `trial_args` makes of an SFT recipe's config
            raise TypeError(f"an SFT trial trains with an SFTConfig, got {type(args).__name__}.")
        args = dataclasses.replace(args, model_init_kwargs=data.init_kwargs)
        return ConstrainedSFTTrainer(
            model=data.model_path,
            args=args,
            train_dataset=data.train,
            eval_dataset=data.validation,
            peft_config=data.peft_config,
            callbacks=list(callbacks),
            processing_class=data.processor,
        )


class SFTTask(Task):
    name = NAME
    headline = Headline("accuracy", "mean token accuracy (final layer, supervised tokens)", higher_is_better=True)
    data_arguments = DataArguments
    generates = True

    def __init__(self) -> None:
        self.training, self.measuring, self.searching = SFTTraining(), SFTMeasuring(), SFTSearching(self)

    def parser_classes(self) -> tuple[type, ...]:
        return (ScriptArguments, ModelConfig, ConstrainedSFTConfig)

    def recipe(self, parsed: tuple) -> SFTRecipe:
        script, model, training = parsed
        return Recipe(script, model, training)


def load_causal_lm(spec, dtype):
    """(model, tokenizer) of a causal LM (`data.ModelSpec`: a folder, Hub id, alias or LoRA adapter), checked first
    (`causal_lm_config`) and loaded whole (`data.load_pretrained` refuses newly initialised weights)."""
    causal_lm_config(spec)
    source = tokenizer_source(spec)  # the model's own folder, or an adapter's (else its base's)
    if reads_images(source if not is_adapter(spec.path) else resolve_model_path(adapter_base(spec), "--base_model")):
        model, _ = load_pretrained(spec, AutoModelForImageTextToText, dtype, tokenizer=False)
        return model, load_processor(source, spec.flag)  # a VLM reads its images through its processor
    return load_pretrained(spec, AutoModelForCausalLM, dtype)


def causal_lm_config(spec: ModelSpec) -> PretrainedConfig | None:
    """
    The text config of the causal LM `spec` names (an adapter's: its base's), read without loading weights, so that
    every model of a command is checked before the first is scored: a sequence classifier or a model class that
    cannot generate (a bare base model) is refused in one line naming `spec.flag`, the folder and what it is. None
    where the config cannot be read here (a Hub id offline): loading then names the problem.
    """
    import transformers

    path = spec.path
    if is_adapter(path):
        with open(os.path.join(path, "adapter_config.json")) as f:
            path = spec.base_model or json.load(f).get("base_model_name_or_path") or path
    try:
        config = AutoConfig.from_pretrained(resolve_model_path(path, spec.flag))
    except (OSError, ValueError):
        return None
    name = (config.architectures or [None])[0]
    cls = getattr(transformers, name, None) if name else None
    if has_classification_head(config) or (cls is not None and not issubclass(cls, transformers.GenerationMixin)):
        raise ValueError(
            f"`{spec.flag}` {spec.path}: a saved {name}, not a causal language model; this needs a *ForCausalLM "
            "(a sequence classifier is measured by `eval robustness --task classification`)."
        )
    return config.get_text_config()
