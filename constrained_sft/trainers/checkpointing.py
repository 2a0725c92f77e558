"""
The checkpoint side of a constrained trainer: before training, the output folder checked (`output_dir`) and the run
resumed only from a checkpoint that fits it (model shape, constraint layout; said with its step); during training,
the constraint state saved beside the optimizer's, saves a kill cannot leave half-done, no step past the end; and
every file of a checkpoint that fails to load named in one line.
"""

from __future__ import annotations

import json
import logging
import os

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from ..constraints.state_io import STATE_JSON, load_state, read_state, save_state
from ..utils import unwrap_model, write_json
from .checkpoints import ARGS_JSON, CheckpointError, mark_complete, remove_if_incomplete, resolve_resume
from .output_dir import auto_resume, check_output_dir, prepare_output_dir, refusal_leaves_nothing, run_identity

logger = logging.getLogger(__name__)

SHAPE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size", "num_labels")


def check_fits(checkpoint: str, model, primal_dual, constraints: str) -> None:
    """
    Refuse a checkpoint of another model shape or constraint layout before anything is loaded (naming the file and
    the differing fields); say when a constrained checkpoint is resumed without constraints, or the reverse.
    """
    config_path = os.path.join(checkpoint, "config.json")
    config = getattr(unwrap_model(model), "config", None)
    if os.path.isfile(config_path) and config is not None:
        from transformers import AutoConfig

        try:
            saved = AutoConfig.from_pretrained(checkpoint)  # defaults filled in (config.json omits num_labels=2)
        except (OSError, ValueError) as error:
            raise CheckpointError(f"`resume_from_checkpoint`: {config_path} cannot be read ({error}).") from None
        saved, current = _shape(saved), _shape(config)
        diffs = [k for k in SHAPE_KEYS if k in saved and k in current and saved[k] != current[k]]
        if diffs:
            shown = ", ".join(f"{k} {saved[k]} vs {current[k]}" for k in diffs)
            raise CheckpointError(
                f"`resume_from_checkpoint`: {config_path} is a model of another shape ({shown} in this run); resume "
                "it with the model it was trained from, or start a new run."
            )
    _, meta = read_state(checkpoint)
    try:
        primal_dual.check_saved_spec(meta["spec"])
    except (ValueError, KeyError) as error:
        raise CheckpointError(f"`resume_from_checkpoint`: {os.path.join(checkpoint, STATE_JSON)}: {error}") from None
    args_path = os.path.join(checkpoint, ARGS_JSON)
    if os.path.isfile(args_path):
        with open(args_path) as f:
            was = json.load(f).get("constraints")
        if was is not None and was != constraints:
            logger.warning(
                "Resuming a checkpoint trained with `constraints: %s` as `constraints: %s`: %s",
                was,
                constraints,
                "its multipliers are loaded but no longer used."
                if constraints == "none"
                else "the multipliers "
                "start from the checkpoint's values (zero for an ERM run) and constraints apply from here on.",
            )


def _shape(config) -> dict:
    """The shape fields a config has (`num_labels` included, which `to_dict()` leaves out)."""
    return {k: getattr(config, k) for k in SHAPE_KEYS if hasattr(config, k)}


def _load_or_refuse(what: str, checkpoint: str, load) -> None:
    """Run `load`; any failure becomes a one-line [`CheckpointError`] naming the checkpoint and what was read."""
    try:
        load()
    except CheckpointError:
        raise
    except Exception as error:  # noqa: BLE001 - torch, safetensors and pickle raise many kinds
        raise CheckpointError(
            f"`resume_from_checkpoint`: {checkpoint}: its {what} cannot be loaded ({type(error).__name__}: "
            f"{str(error).splitlines()[0][:200] if str(error) else ''}). Resume from an earlier checkpoint."
        ) from None


class CheckpointingMixin:
    """
    The checkpoint side of a constrained trainer (mixed in before a `transformers.Trainer` subclass that has a
    `primal_dual`): the constraint state saved beside the optimizer's and restored with it, saves a kill cannot leave
    half-done, `resume_from_checkpoint=True` resolved to the newest complete checkpoint, and no step past the end.
    """

    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        """
        `Trainer.train`, after checking the output folder (see `output_dir`): `resume_from_checkpoint=True` takes
        the newest *complete* checkpoint (see `resolve_resume`), unset it resumes the same run's own folder, and the
        checkpoint must fit this run.
        """
        identity = getattr(self, "run_identity", None) or run_identity(self.args, self.model)
        with refusal_leaves_nothing(self.args, getattr(self, "output_dir_existed", True)):
            check_output_dir(self.args, self.model, resume_from_checkpoint, identity)
            resume = auto_resume(self.args, identity, resume_from_checkpoint)
            main = self.is_world_process_zero()
            checkpoint = resolve_resume(resume, self.args.output_dir, log=main)
            if checkpoint is not None:
                check_fits(checkpoint, self.model, self.primal_dual, self.args.constraints)
                with open(os.path.join(checkpoint, "trainer_state.json")) as f:
                    step = json.load(f).get("global_step")
                if main:
                    logger.warning("Resuming from %s (optimizer step %s).", checkpoint, step)
        self.accelerator.wait_for_everyone()  # every rank has read the folder before the main one changes it
        if self.args.should_save:
            prepare_output_dir(self.args, identity, resume)
        return super().train(checkpoint, *args, **kwargs)

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        _load_or_refuse(
            "model weights",
            resume_from_checkpoint,
            lambda: super(CheckpointingMixin, self)._load_from_checkpoint(resume_from_checkpoint, model),
        )

    def _load_rng_state(self, checkpoint):
        _load_or_refuse(
            "RNG state (rng_state*.pth)",
            checkpoint,
            lambda: super(CheckpointingMixin, self)._load_rng_state(checkpoint),
        )

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        super()._save_optimizer_and_scheduler(output_dir)
        if self.args.should_save:
            save_state(self.primal_dual, output_dir)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        _load_or_refuse(
            "optimizer / scheduler state (optimizer.pt, scheduler.pt)",
            checkpoint,
            lambda: super(CheckpointingMixin, self)._load_optimizer_and_scheduler(checkpoint),
        )
        if checkpoint is not None:  # a missing, damaged or foreign state is refused, naming the file
            load_state(self.primal_dual, checkpoint)

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        """
        transformers' save, with the training arguments as JSON (`training_args.json`, `*_token` secrets masked)
        instead of the pickled `training_args.bin`, which holds the arguments as a Python object, a Hub token in clear
        included, and can only be read by unpickling.
        """
        super()._save(output_dir, state_dict)
        if not self.args.should_save:  # transformers calls `_save` on every rank; only the main one writes
            return
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        pickled = os.path.join(output_dir, "training_args.bin")
        if os.path.exists(pickled):
            os.remove(pickled)
        settings = self.args.to_dict()  # masks every `*_token`; the tokenizer's own tokens are no secret
        settings.update({k: getattr(self.args, k) for k in ("eos_token", "pad_token") if hasattr(self.args, k)})
        write_json(os.path.join(output_dir, ARGS_JSON), settings)

    def _save_checkpoint(self, model, trial) -> None:
        """
        transformers' save, framed so that a kill at any moment leaves either a complete checkpoint or one that
        `resume_from_checkpoint=True` skips: leftovers of a cut-short save of the same step are removed first, and
        the completion marker is written once every rank has saved, before older checkpoints are rotated away.
        """
        run_dir = self._get_output_dir(trial=trial)
        folder = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        if self.args.should_save and remove_if_incomplete(folder):
            logger.info("Removed %s, left incomplete by an interrupted save, before saving it again.", folder)
        self.accelerator.wait_for_everyone()
        limit, self.args.save_total_limit = self.args.save_total_limit, None  # rotate once this one is complete
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        self.accelerator.wait_for_everyone()  # every rank's files (its RNG state, its shards) are on disk
        if self.args.should_save:
            mark_complete(folder, self.state.global_step)
            rotate_checkpoints(run_dir, limit, self.state.best_model_checkpoint, use_mtime=True)

    def _run_epoch(self, *args, **kwargs):
        """
        transformers enters an epoch without checking the step budget, so a run resumed from the checkpoint of its
        last step would train one step more (and move the multipliers); a finished run resumes to nothing to do.
        """
        if self.state.global_step >= self.state.max_steps > 0:
            self.control.should_training_stop = True
            return None
        return super()._run_epoch(*args, **kwargs)
