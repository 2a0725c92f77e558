"""
`constrained-sft train` for `task: sft` recipes (the default): fine-tune a causal LM with `ConstrainedSFTTrainer` from
a YAML recipe plus command-line overrides, the way `trl sft` does.

    constrained-sft train --config recipes/smollm2-135m/sharegpt/constrained.yaml [--max_steps 10 ...]
    accelerate launch --config_file accelerate_configs/ddp.yaml -m constrained_sft train --config <recipe>

YAML keys are exactly the fields of `ScriptArguments`, TRL's `ModelConfig` and `ConstrainedSFTConfig`; an unknown
key is an error. Everything that can be checked (keys, model path, data rows) is checked before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import ModelConfig, TrlParser, get_peft_config

from ..config import ConstrainedSFTConfig
from ..data import DataArguments, load_train_eval, resolve_model_path
from ..trainers import ConstrainedSFTTrainer
from .common import parse, train_and_report


@dataclass
class ScriptArguments(DataArguments):
    """Data source fields, plus what the `train` command does around training."""

    task: str = field(
        default="sft",
        metadata={"help": "'sft' (causal LM, this recipe kind) or 'classification'.", "choices": ["sft"]},
    )
    evaluate_before_training: bool = field(
        default=False,
        metadata={"help": "Evaluate the held-out split before training too, for a before / after layer table."},
    )


def make_parser() -> TrlParser:
    return TrlParser((ScriptArguments, ModelConfig, ConstrainedSFTConfig))


def run(script_args: ScriptArguments, model_args: ModelConfig, training_args: ConstrainedSFTConfig) -> dict:
    model_path = resolve_model_path(model_args.model_name_or_path)
    train_dataset, eval_dataset = load_train_eval(script_args)
    init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    training_args.model_init_kwargs = {**init_kwargs, **(training_args.model_init_kwargs or {})}
    trainer = ConstrainedSFTTrainer(
        model=model_path,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        peft_config=get_peft_config(model_args),
    )
    return train_and_report(trainer, script_args.evaluate_before_training)


def main(argv: list[str] | None = None) -> int:
    script_args, model_args, training_args = parse(make_parser(), argv)
    run(script_args, model_args, training_args)
    return 0
