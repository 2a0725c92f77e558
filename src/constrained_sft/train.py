"""
`constrained-sft train`: fine-tune from a YAML recipe plus command-line overrides, the way `trl sft` does.

    constrained-sft train --config recipes/smollm2-135m/sharegpt/constrained.yaml [--max_steps 10 ...]
    accelerate launch --config_file accelerate_configs/ddp.yaml -m constrained_sft train --config <recipe>

YAML keys are exactly the fields of `ScriptArguments`, TRL's `ModelConfig` and `ConstrainedSFTConfig`; an unknown
key is an error. Everything that can be checked (keys, model path, data rows) is checked before anything is written.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field

from trl import ModelConfig, TrlParser, get_peft_config

from .config import ConstrainedSFTConfig
from .data import DataArguments, load_train_eval
from .models import resolve_model_path
from .sft_trainer import ConstrainedSFTTrainer


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


def train_and_report(trainer, evaluate_before: bool, accuracy_key: str = "mean_token_accuracy") -> dict:
    """Evaluate (optionally before), train, evaluate, save, print the layer table on rank 0, and shut down cleanly."""
    args = trainer.args
    before = trainer.evaluate(metric_key_prefix="before") if evaluate_before else {}
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    after = trainer.evaluate()
    trainer.save_model(args.output_dir)
    if trainer.is_world_process_zero():
        print(summary_table(trainer, before, after, accuracy_key=accuracy_key))
    finish(trainer)
    return {"before": before, "after": after}


def finish(trainer) -> None:
    """Wait for every rank, close trackers and the process group, then drop the DDP wrapper while Python is alive.

    Without the barrier a non-main rank (which writes no shards) tears its group down while rank 0 still saves. A
    DDP wrapper left for interpreter teardown keeps gloo's worker threads and their tensors alive until then, and
    freeing them there can abort the process at exit ("terminate called without an active exception").
    """
    trainer.accelerator.wait_for_everyone()
    if hasattr(trainer, "end"):  # transformers >= 5.18: finish trackers, destroy the process group
        trainer.end()
    trainer.accelerator.free_memory()  # the prepared model / optimizer / scheduler references, then gc.collect()
    trainer.model_wrapped = trainer.model
    gc.collect()


def summary_table(trainer, before: dict, after: dict, accuracy_key: str = "mean_token_accuracy") -> str:
    """Per-layer held-out losses before / after, the multipliers, and where the feasibility report is."""
    spec = trainer.primal_dual.spec
    duals = trainer.primal_dual.dual_metrics() if trainer.primal_dual.enabled else {}

    def fmt(value: float | None, spec: str = ".3f") -> str:
        return "-" if value is None else format(value, spec)

    lines = [f"\n{'layer':>6} {'held-out loss before':>21} {'after':>9} {'lambda':>9}"]
    for layer in spec.layers:
        lines.append(
            f"{layer:>6} {fmt(before.get(f'before_layer_loss/{layer}')):>21} "
            f"{fmt(after.get(f'eval_layer_loss/{layer}')):>9} {fmt(duals.get(f'dual/{layer}'), '.4f'):>9}"
        )
    for key, label in (
        ("descent_fraction", "descent fraction"),
        ("feasible_fraction", "feasible fraction"),
        (accuracy_key, "accuracy"),
    ):
        lines.append(f"{label:>28}: {fmt(before.get(f'before_{key}'))} -> {fmt(after.get(f'eval_{key}'))}")
    lines.append(f"constraints report: {os.path.join(trainer.args.output_dir, 'constraints.json')}")
    lines.append(f"model saved to: {trainer.args.output_dir}")
    return "\n".join(lines)


def recipe_task(argv: list[str]) -> str:
    """`task` from the command line, else from the `--config` YAML, else 'sft'."""
    if "--task" in argv:
        return argv[argv.index("--task") + 1]
    if "--config" in argv:
        import yaml

        with open(argv[argv.index("--config") + 1]) as f:
            return (yaml.safe_load(f) or {}).get("task", "sft")
    return "sft"


def main(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    task = recipe_task(argv)
    if task == "classification":
        from .train_classifier import main as train_classifier

        return train_classifier(argv)
    if task != "sft":
        raise ValueError(f"`task` must be 'sft' or 'classification', got {task!r}.")
    script_args, model_args, training_args = make_parser().parse_args_and_config(argv)
    run(script_args, model_args, training_args)
    return 0
