"""What every task's `train` does around training: evaluate (optionally before), train, evaluate, save, print the
layer table on rank 0, and shut down cleanly."""

from __future__ import annotations

import dataclasses
import gc
import os
from typing import TYPE_CHECKING

from ..constraints.feasibility import REPORT
from ..data import DataError
from ..data.local_files import SOURCE_FIELDS, check_regular
from ..trainers import check_output_dir
from ..trainers.model_card import check_card_path
from ..trainers.resume import RunIdentity, run_identity
from ..utils.content import content_id
from .base import TrainedModel

if TYPE_CHECKING:  # what transformers hands every callback
    from transformers import TrainerControl, TrainerState, TrainingArguments

DONE = "training_args.json"  # Trainer.save_model writes it last: a run folder holding it is finished
# data fields that decide nothing of the trained weights
DATA_BOOKKEEPING = ("evaluate_before_training",)


def data_identity(script) -> dict:
    """What a run trains on, for its identity (`trainers.resume.run_identity`): the recipe's data fields, and for a
    local file or folder its content id (`utils.content`), so that a run resumed on other data, the same path with
    other contents included, is another run, as one with another seed is."""
    fields = {k: v for k, v in dataclasses.asdict(script).items() if k not in DATA_BOOKKEEPING}
    local = {k: v for k, v in fields.items() if k in SOURCE_FIELDS and isinstance(v, str) and os.path.exists(v)}
    for k, v in local.items():  # a split's name ('train') is never read as a path, whatever folder the user is in
        check_regular(v, k)
    files = {k: content_id(v) for k, v in local.items()}
    return {**fields, **({"files": files} if files else {})}


def check_run(recipe, model_source) -> RunIdentity:
    """Everything a training run checks before any work, returning its identity: a stream needs `max_steps` (it has
    no length to count epochs in), the output folder must be this run's or free (`trainers.check_output_dir`, the
    data part of the identity included) and have room for the model card (`trainers.model_card.check_card_path`)."""
    if getattr(recipe.script, "streaming", False) and recipe.training.max_steps < 1:
        raise DataError(
            "`streaming` reads the data as a stream, which has no length to count epochs in: set `max_steps` (the "
            "number of optimizer steps to train)."
        )
    identity = run_identity(recipe.training, model_source, data_identity(recipe.script))
    check_output_dir(recipe.training, model_source, recipe.training.resume_from_checkpoint, identity)
    check_card_path(recipe.training.output_dir)  # room for the model card beside the user's files
    return identity


def is_finished(output_dir: str) -> bool:
    """Whether a run saved its model into `output_dir` (a sweep's retraining or a study reuses such a run)."""
    return os.path.isfile(os.path.join(output_dir, DONE))


def train_and_report(
    trainer, evaluate_before: bool, accuracy_key: str | None = "mean_token_accuracy", end: bool = True
) -> TrainedModel:
    """Evaluate (optionally before), train, evaluate, save (the model and trainer_state.json), print the layer table
    on rank 0, and shut down cleanly (`end`: also destroy the process group; False when more runs follow in this
    process)."""
    args = trainer.args
    if evaluate_before and trainer.is_deepspeed_enabled:
        before = evaluate_at_train_start(trainer)
    else:
        before = trainer.evaluate(metric_key_prefix="before") if evaluate_before else {}
        trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    after = trainer.evaluate()
    trainer.save_state()  # trainer_state.json: the per-step log (multipliers, slack, losses) for later analysis
    trainer.save_model(args.output_dir)  # last: its training_args.json marks the run finished
    if trainer.is_world_process_zero():
        print(summary_table(trainer, before, after, accuracy_key=accuracy_key))
    finish(trainer, end)
    return TrainedModel(args.output_dir, before, after)


def evaluate_at_train_start(trainer) -> dict:
    """
    Train, evaluating first once DeepSpeed's training engine exists (in `on_train_begin`), and return that
    evaluation's metrics. transformers cannot evaluate a DeepSpeed model before `train()`: under ZeRO-1/2 its
    evaluation refuses ("ZeRO inference only makes sense with ZeRO Stage 3"), and under ZeRO-3 the inference engine
    it builds is then taken for the training engine, which is never built (`'NoneType' object has no attribute
    'backward'` at the first step; transformers PR #44889). A resumed run is evaluated as resumed.
    """
    from transformers import TrainerCallback

    metrics: dict = {}

    class EvaluateFirst(TrainerCallback):
        def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
            metrics.update(trainer.evaluate(metric_key_prefix="before"))

    callback = EvaluateFirst()
    trainer.add_callback(callback)
    try:
        trainer.train(resume_from_checkpoint=trainer.args.resume_from_checkpoint)
    finally:
        trainer.remove_callback(callback)
    return metrics


def finish(trainer, end: bool = True) -> None:
    """Wait for every rank, release what uses the process group while every rank still holds it, then close
    trackers and the group.

    The order matters. Without the first barrier a non-main rank (which writes no shards) tears down while rank 0
    still saves. The DDP wrapper (its reducer holds the group and gloo's in-flight state) and accelerate's prepared
    objects are released while the group is still up and every peer still connected — the second barrier keeps a
    peer from exiting while this rank frees them; a wrapper freed only after `destroy_process_group` once hung a
    rank in CI, and one left for interpreter teardown can abort the process at exit ("terminate called without an
    active exception"). Only then is the group destroyed (`end`).
    """
    accelerator = trainer.accelerator
    accelerator.wait_for_everyone()
    accelerator.free_memory()  # the prepared model / optimizer / scheduler references, then gc.collect()
    trainer.model_wrapped = trainer.model
    gc.collect()
    accelerator.wait_for_everyone()
    if end and hasattr(trainer, "end"):  # transformers >= 5.18: finish trackers, destroy the process group
        trainer.end()


def summary_table(trainer, before: dict, after: dict, accuracy_key: str | None = "mean_token_accuracy") -> str:
    """Per-layer held-out losses before / after, the multipliers, and where the feasibility report is."""
    spec = trainer.primal_dual.spec
    duals = trainer.primal_dual.dual_metrics() if trainer.primal_dual.enabled else {}

    def fmt(value: float | None, spec: str = ".4g") -> str:
        return "-" if value is None else format(value, spec)

    lines = [f"\n{'layer':>6} {'held-out loss before':>21} {'after':>9} {'lambda':>9}"]
    for layer in spec.layers:
        lines.append(
            f"{layer:>6} {fmt(before.get(f'before_layer_loss/{layer}')):>21} "
            f"{fmt(after.get(f'eval_layer_loss/{layer}')):>9} {fmt(duals.get(f'dual/{layer}'), '.4f'):>9}"
        )
    rows = [("descent_fraction", "descent fraction"), ("feasible_fraction", "feasible fraction")]
    for key, label in rows + ([(accuracy_key, "accuracy")] if accuracy_key else []):
        lines.append(f"{label:>28}: {fmt(before.get(f'before_{key}'))} -> {fmt(after.get(f'eval_{key}'))}")
    lines.append(f"constraints report: {os.path.join(trainer.args.output_dir, REPORT)}")
    lines.append(f"model saved to: {trainer.args.output_dir}")
    return "\n".join(lines)
