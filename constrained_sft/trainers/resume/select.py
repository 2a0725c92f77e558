"""
Which checkpoint a run resumes from, and whether it fits the run. A kill can land inside a save and leave a `checkpoint-N` folder with some files
and not others; transformers' `resume_from_checkpoint=True` picks the highest N regardless. Here a checkpoint counts
as complete only once `checkpoint_complete.json` is written, after every rank has written its files; resuming with
`True` takes the newest complete checkpoint whose constraint state reads back, and names the folders it skipped. A
checkpoint of another model shape or constraint layout is refused before anything is loaded, and a load that fails
later names the checkpoint and what it was reading.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ...constraints import ConstraintStateError, mode_of
from ...utils.modules import unwrap_model
from .files import ARGS_JSON, MARKER, STATE_JSON, TRAINER_STATE, file_problem, read_state

logger = logging.getLogger(__name__)

SHAPE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size", "num_labels")
INCOMPLETE = "incomplete"
_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from; the message names the folder and what is wrong."""


def checkpoint_problem(directory: str) -> str | None:
    """None if `directory` is a complete checkpoint whose states read back, else what is wrong, in a few words."""
    marker = os.path.join(directory, MARKER)
    if not os.path.isfile(marker):
        return f"{INCOMPLETE}, no {MARKER}: the run was stopped while saving it"
    try:
        with open(marker) as f:
            saved = json.load(f)
        files, sizes = saved["files"], saved.get("sizes", {})
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"damaged {MARKER} ({type(error).__name__}: {error})"
    missing = [name for name in files if not os.path.exists(os.path.join(directory, name))]
    if missing:
        return f"damaged: {', '.join(missing)} listed in {MARKER} but missing"
    try:  # first: a constraint state of a newer format is reported as such (and never skipped over)
        read_state(directory)
    except ConstraintStateError as error:
        return str(error)
    for name in [*files, *([TRAINER_STATE] if TRAINER_STATE not in files else [])]:
        if problem := file_problem(os.path.join(directory, name), sizes.get(name)):
            return f"damaged: {problem}"
    return None


def checkpoints(output_dir: str) -> list[tuple[int, str]]:
    """(step, path) of every `checkpoint-N` folder in `output_dir`, newest first."""
    if not os.path.isdir(output_dir):
        return []
    found = [(_CHECKPOINT.match(name), os.path.join(output_dir, name)) for name in os.listdir(output_dir)]
    return sorted(((int(m.group(1)), path) for m, path in found if m and os.path.isdir(path)), reverse=True)


def resume_value(value: str | bool | None) -> str | bool | None:
    """`resume_from_checkpoint` as given, with the strings 'true' / 'false' of a command line or YAML as bools."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return value


def resolve_resume(resume_from_checkpoint: str | bool | None, output_dir: str, log: bool = True) -> str | None:
    """
    The checkpoint to resume from: with `True` the newest complete one in `output_dir` (one log line per skipped
    folder; None, training from step 0, when the run was killed before any checkpoint was complete); with a path,
    that path if it is complete. Raises [`CheckpointError`] when there is nothing to resume from. Every rank resolves
    the same folder; `log` is False on all but one, so each note is printed once.
    """
    resume_from_checkpoint = resume_value(resume_from_checkpoint)
    if resume_from_checkpoint is None or resume_from_checkpoint is False:
        return None
    if resume_from_checkpoint is not True:
        path = str(resume_from_checkpoint)
        if not os.path.isdir(path):
            raise CheckpointError(
                f"`resume_from_checkpoint` {path} is not a directory; allowed: True (the newest complete checkpoint in "
                "output_dir), False, or a checkpoint folder."
            )
        inside = [p for _, p in checkpoints(path)]
        if inside and not os.path.isfile(os.path.join(path, MARKER)):
            newest = next((p for p in inside if checkpoint_problem(p) is None), None)
            raise CheckpointError(
                f"`resume_from_checkpoint` {path} is a run folder, not a checkpoint; pass one of its checkpoint-<step> "
                f"folders (the newest complete: {newest}), or `true` with `output_dir` {path}."
            )
        problem = checkpoint_problem(path)
        if problem is not None:
            parent = os.path.dirname(os.path.abspath(path))
            newest = next((p for _, p in checkpoints(parent) if checkpoint_problem(p) is None), None)
            hint = f" The newest complete checkpoint there is {newest}." if newest else ""
            raise CheckpointError(
                f"`resume_from_checkpoint`: {path} cannot be resumed from: {problem.rstrip('.')}.{hint}"
            )
        return path
    found = checkpoints(output_dir)
    if not found:
        raise CheckpointError(
            f"`resume_from_checkpoint=True`: no checkpoint-<step> folder in output_dir {output_dir}. Train without "
            "resuming, or point `output_dir` at the run to resume."
        )
    skipped = []
    chosen: str | None = None
    for _, path in found:
        problem = checkpoint_problem(path)
        if problem is None:
            chosen = path
            break
        skipped.append((path, problem))
    else:
        if any(not why.startswith(INCOMPLETE) for _, why in skipped):
            details = "; ".join(f"{name}: {why}" for name, why in skipped)
            raise CheckpointError(
                f"`resume_from_checkpoint=True`: no checkpoint in {output_dir} can be resumed ({details})"
            )
        # else: killed before its first checkpoint was complete, nothing was saved, so step 0 it is (`chosen` None)
    for name, why in skipped if log else []:
        logger.warning("Skipped %s (%s); resuming from %s.", name, why, chosen or "step 0, no checkpoint is complete")
    return chosen


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
                if not mode_of(constraints).trains_layers
                else "the multipliers "
                "start from the checkpoint's values (zero for an ERM run) and constraints apply from here on.",
            )


def _shape(config) -> dict:
    """The shape fields a config has (`num_labels` included, which `to_dict()` leaves out)."""
    return {k: getattr(config, k) for k in SHAPE_KEYS if hasattr(config, k)}


def load_or_refuse(what: str, checkpoint: str | None, load: Callable[[], object]) -> None:
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
