"""
Every private method of `transformers.Trainer` this package overrides, and every private attribute or method of
transformers or TRL it reads, in one file: a transformers or TRL upgrade is an audit of this file alone. Each override
says which behaviour of transformers it changes and why; each calls the original (`super()`) unless it says otherwise.

Overridden (transformers 5.23-5.24): `_save_checkpoint`, `_save`, `_save_optimizer_and_scheduler`,
`_load_optimizer_and_scheduler`, `_load_from_checkpoint`, `_load_rng_state`, `_run_epoch`, `_get_grad_norm`; (TRL
1.16, called by `SFTTrainer` alone) `_prepare_dataset`.
Read: TRL's `SFTTrainer._metrics` (`trl_eval_metrics`); called: `Trainer._prepare_inputs` (`prepare_inputs`),
`Trainer._get_output_dir` (in `_save_checkpoint`).
"""

from __future__ import annotations

import copy
import logging
import os
from typing import TYPE_CHECKING, Any

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from ...utils.types import Batch
from .files import load_state, mark_complete, remove_if_incomplete, save_state, write_training_args
from .select import load_or_refuse

logger = logging.getLogger(__name__)


def trl_eval_metrics(trainer: Any) -> dict[str, list[float]] | None:
    """TRL's evaluation metrics buffer (`SFTTrainer._metrics["eval"]`: name -> values), None on a plain `Trainer`.
    TRL empties it only in `log()`, which `predict()` never calls, and names its keys `eval_*` whatever the prefix."""
    return getattr(trainer, "_metrics", {}).get("eval")


def prepare_inputs(trainer: Any, inputs: Batch) -> Batch:
    """`Trainer._prepare_inputs`: a batch moved to the trainer's device, as its training and evaluation steps see it."""
    return trainer._prepare_inputs(inputs)


if TYPE_CHECKING:  # the type checker reads the mixins as the Trainer they are mixed into; at run time: `object`
    from transformers import Trainer
    from trl import SFTConfig

    from ...constraints import PrimalDual

    class TrainerBase(Trainer):
        # `SFTTrainer`'s (TRL), for the checker: the override below is called by it alone
        def _prepare_dataset(
            self, dataset, processing_class, args: SFTConfig, packing, formatting_func, dataset_name
        ) -> Any: ...
else:
    TrainerBase = object


class TrainerOverrides(TrainerBase):
    """
    Mixed in before a `transformers.Trainer` subclass that has a `primal_dual`: the constraint state saved beside
    the optimizer's and restored with it, saves a kill cannot leave half-done, every load failure named in one line,
    no step past the end, and the step's gradient norm kept for the non-finite guard.
    """

    if TYPE_CHECKING:  # the constrained trainer's (`ConstrainedTrainerMixin`), which these overrides serve

        @property
        def primal_dual(self) -> PrimalDual: ...

        def write_model_card(
            self, folder: str, model_name: str | None = None, tags: list[str] | None = None
        ) -> str: ...

        @property
        def output_folder(self) -> str: ...

        def prepare_dataset(
            self, prepare, dataset, processing_class, args: SFTConfig, packing, formatting_func, dataset_name
        ) -> Any: ...  # `ConstrainedSFTTrainer`'s

    # transformers writes the optimizer and scheduler; the constraint state (multipliers, dual-optimizer moments)
    # is written beside them, so a checkpoint holds both halves of the primal-dual state.
    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        super()._save_optimizer_and_scheduler(output_dir)
        if self.args.should_save:
            save_state(self.primal_dual, output_dir)

    # transformers loads the optimizer and scheduler with raw torch errors; here any failure is one line naming the
    # checkpoint, and the constraint state is restored with them (a missing, damaged or foreign one refused).
    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        load_or_refuse(
            "optimizer / scheduler state (optimizer.pt, scheduler.pt)",
            checkpoint,
            lambda: super(TrainerOverrides, self)._load_optimizer_and_scheduler(checkpoint),
        )
        if checkpoint is not None:
            load_state(self.primal_dual, checkpoint)

    # transformers' weight loading, with its failure (torch, safetensors, pickle) as one line naming the checkpoint.
    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        load_or_refuse(
            "model weights",
            resume_from_checkpoint,
            lambda: super(TrainerOverrides, self)._load_from_checkpoint(resume_from_checkpoint, model),
        )

    # transformers' RNG restore, with its failure as one line naming the checkpoint.
    def _load_rng_state(self, checkpoint):
        load_or_refuse(
            "RNG state (rng_state*.pth)",
            checkpoint,
            lambda: super(TrainerOverrides, self)._load_rng_state(checkpoint),
        )

    # transformers pickles the arguments (`training_args.bin`, a Hub token in clear included); here they are JSON.
    # transformers calls `_save` on every rank; only the main one writes.
    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        super()._save(output_dir, state_dict)
        if self.args.should_save:
            write_training_args(self.args, output_dir if output_dir is not None else self.output_folder)

    # transformers saves a checkpoint's files one by one and rotates old checkpoints inside the save, so a kill can
    # leave a half-written `checkpoint-N` that `resume_from_checkpoint=True` would pick, after the complete one was
    # rotated away. Here: leftovers of a cut-short save of the same step go first, rotation is held back
    # (`save_total_limit` unset on a copy of the arguments the call reads; the run's own are never changed), the completion marker is written once every rank has saved, and only
    # then are older checkpoints rotated.
    def _save_checkpoint(self, model, trial) -> None:
        run_dir = self._get_output_dir(trial=trial)
        folder = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        if self.args.should_save and remove_if_incomplete(folder):
            logger.info("Removed %s, left incomplete by an interrupted save, before saving it again.", folder)
        self.accelerator.wait_for_everyone()
        limit, own = self.args.save_total_limit, self.args
        holding = copy.copy(own)  # the user's arguments stay as they are: only this call's copy has no limit
        holding.save_total_limit = None
        self.args = holding
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args = own
        self.accelerator.wait_for_everyone()  # every rank's files (its RNG state, its shards) are on disk
        if self.args.should_save:
            self.write_model_card(folder)  # the checkpoint's own card (the mixin's), as TRL writes one per save
            mark_complete(folder, self.state.global_step)
            rotate_checkpoints(run_dir, limit, self.state.best_model_checkpoint, use_mtime=True)

    # transformers enters an epoch without checking the step budget, so a run resumed from the checkpoint of its last
    # step would train one step more (and move the multipliers); a finished run resumes to nothing to do.
    def _run_epoch(self, *args, **kwargs):
        if self.state.global_step >= self.state.max_steps > 0:
            self.control.should_training_stop = True
            return None
        return super()._run_epoch(*args, **kwargs)

    # TRL drops the rows truncation leaves without a supervised token silently, and keeps them when it packs (they
    # take token slots and carry no loss); here a line says how many, and bfd packing packs the rows unpacked training
    # keeps (`ConstrainedSFTTrainer.prepare_dataset`, `trainers.packing`). Only `SFTTrainer` calls it.
    def _prepare_dataset(self, dataset, processing_class, args: SFTConfig, packing, formatting_func, dataset_name):
        prepare = super()._prepare_dataset
        return self.prepare_dataset(prepare, dataset, processing_class, args, packing, formatting_func, dataset_name)

    # transformers computes the step's clipped global gradient norm here (a device scalar; under FSDP2 a replicated
    # DTensor) and passes it on; it is also kept, unchanged, for the non-finite guard of the dual step.
    def _get_grad_norm(self, model, grad_norm=None):
        self._step_grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        return self._step_grad_norm
