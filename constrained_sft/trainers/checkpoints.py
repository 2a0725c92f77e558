"""
Which checkpoint a run resumes from. A kill can land inside a save and leave a `checkpoint-N` folder with some files
and not others; transformers' `resume_from_checkpoint=True` picks the highest N regardless. Here a checkpoint counts
as complete only once `checkpoint_complete.json` is written, after every rank has written its files; resuming with
`True` takes the newest complete checkpoint whose constraint state reads back, and names the folders it skipped.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from ..constraints.state_io import ConstraintStateError, load_state, read_state, save_state
from ..utils import write_json

logger = logging.getLogger(__name__)

ARGS_JSON = "training_args.json"  # written by every save, in place of transformers' pickled training_args.bin
MARKER = "checkpoint_complete.json"
TRAINER_STATE = "trainer_state.json"
INCOMPLETE = "incomplete"
_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from; the message names the folder and what is wrong."""


def mark_complete(directory: str, global_step: int) -> None:
    """Written last, by the main process, once every rank has saved: the folder is whole from here on."""
    files = sorted(name for name in os.listdir(directory) if name != MARKER)
    write_json(os.path.join(directory, MARKER), {"global_step": global_step, "files": files})


def remove_if_incomplete(directory: str) -> bool:
    """Remove the leftovers of a save that was cut short, before saving the same step again; True if removed."""
    if os.path.isdir(directory) and not os.path.isfile(os.path.join(directory, MARKER)):
        shutil.rmtree(directory)
        return True
    return False


def checkpoint_problem(directory: str) -> str | None:
    """None if `directory` is a complete checkpoint whose states read back, else what is wrong, in a few words."""
    marker = os.path.join(directory, MARKER)
    if not os.path.isfile(marker):
        return f"{INCOMPLETE}, no {MARKER}: the run was stopped while saving it"
    try:
        with open(marker) as f:
            files = json.load(f)["files"]
        with open(os.path.join(directory, TRAINER_STATE)) as f:
            json.load(f)
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"damaged ({type(error).__name__}: {error})"
    missing = [name for name in files if not os.path.exists(os.path.join(directory, name))]
    if missing:
        return f"damaged: {', '.join(missing)} listed in {MARKER} but missing"
    try:
        read_state(directory)
    except ConstraintStateError as error:
        return str(error)
    return None


def checkpoints(output_dir: str) -> list[tuple[int, str]]:
    """(step, path) of every `checkpoint-N` folder in `output_dir`, newest first."""
    if not os.path.isdir(output_dir):
        return []
    found = [(_CHECKPOINT.match(name), os.path.join(output_dir, name)) for name in os.listdir(output_dir)]
    return sorted(((int(m.group(1)), path) for m, path in found if m and os.path.isdir(path)), reverse=True)


def resolve_resume(resume_from_checkpoint: str | bool | None, output_dir: str, log: bool = True) -> str | None:
    """
    The checkpoint to resume from: with `True` the newest complete one in `output_dir` (one log line per skipped
    folder; None, training from step 0, when the run was killed before any checkpoint was complete); with a path,
    that path if it is complete. Raises [`CheckpointError`] when there is nothing to resume from. Every rank resolves
    the same folder; `log` is False on all but one, so each note is printed once.
    """
    if isinstance(resume_from_checkpoint, str) and resume_from_checkpoint.strip().lower() in ("true", "false"):
        resume_from_checkpoint = resume_from_checkpoint.strip().lower() == "true"  # from a command line or YAML
    if resume_from_checkpoint is None or resume_from_checkpoint is False:
        return None
    if resume_from_checkpoint is not True:
        path = str(resume_from_checkpoint)
        if not os.path.isdir(path):
            raise CheckpointError(
                f"`resume_from_checkpoint` {path} is not a directory; allowed: True (the newest complete checkpoint in "
                "output_dir), False, or a checkpoint folder."
            )
        problem = checkpoint_problem(path)
        if problem is not None:
            parent = os.path.dirname(os.path.abspath(path))
            newest = next((p for _, p in checkpoints(parent) if checkpoint_problem(p) is None), None)
            hint = f" The newest complete checkpoint there is {newest}." if newest else ""
            raise CheckpointError(f"`resume_from_checkpoint`: {path} cannot be resumed from: {problem}.{hint}")
        return path
    found = checkpoints(output_dir)
    if not found:
        raise CheckpointError(
            f"`resume_from_checkpoint=True`: no checkpoint-<step> folder in output_dir {output_dir}. Train without "
            "resuming, or point `output_dir` at the run to resume."
        )
    skipped = []
    for _, path in found:
        problem = checkpoint_problem(path)
        if problem is None:
            break
        skipped.append((path, problem))
    else:
        if any(not why.startswith(INCOMPLETE) for _, why in skipped):
            details = "; ".join(f"{name}: {why}" for name, why in skipped)
            raise CheckpointError(
                f"`resume_from_checkpoint=True`: no checkpoint in {output_dir} can be resumed ({details})"
            )
        path = None  # killed before its first checkpoint was complete: nothing was saved, so step 0 it is
    for name, why in skipped if log else []:
        logger.warning("Skipped %s (%s); resuming from %s.", name, why, path or "step 0, no checkpoint is complete")
    return path


class CheckpointingMixin:
    """
    The checkpoint side of a constrained trainer (mixed in before a `transformers.Trainer` subclass that has a
    `primal_dual`): the constraint state saved beside the optimizer's and restored with it, saves a kill cannot leave
    half-done, `resume_from_checkpoint=True` resolved to the newest complete checkpoint, and no step past the end.
    """

    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        """`Trainer.train`; `resume_from_checkpoint=True` takes the newest *complete* checkpoint (see `resolve_resume`)."""
        checkpoint = resolve_resume(resume_from_checkpoint, self.args.output_dir, log=self.is_world_process_zero())
        return super().train(checkpoint, *args, **kwargs)

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        super()._save_optimizer_and_scheduler(output_dir)
        if self.args.should_save:
            save_state(self.primal_dual, output_dir)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)
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
