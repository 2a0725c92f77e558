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

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..constraints.state_io import ConstraintStateError, read_state
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
    """Written last, by the main process, once every rank has saved: the folder is whole from here on. The size of
    every file is recorded, so a file truncated or replaced later is found before resuming."""
    files = sorted(name for name in os.listdir(directory) if name != MARKER)
    sizes = {name: os.path.getsize(os.path.join(directory, name)) for name in files}
    write_json(os.path.join(directory, MARKER), {"global_step": global_step, "files": files, "sizes": sizes})


def file_problem(path: str, size: int | None) -> str | None:
    """None if the checkpoint file at `path` reads as what its name says, else what is wrong. Cheap: sizes, JSON,
    the safetensors header, the zip directory of a `torch.save` file; never the tensors themselves."""
    import zipfile

    name = os.path.basename(path)
    if size is not None and os.path.getsize(path) != size:
        return f"{name} is {os.path.getsize(path)} bytes but was saved as {size} (truncated or replaced)"
    try:
        if name.endswith(".json"):
            with open(path) as f:
                json.load(f)
        elif name.endswith(".safetensors"):
            from safetensors import safe_open

            with safe_open(path, framework="pt"):
                pass
        elif name.endswith((".pt", ".pth", ".bin")) and os.path.isfile(path):
            with zipfile.ZipFile(path):
                pass
    except Exception as error:  # noqa: BLE001 - any reader error means the file cannot be resumed from
        return f"{name} is damaged ({type(error).__name__}: {str(error)[:120]})"
    return None


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
