"""
Output folders that protect work. transformers 5 removed `overwrite_output_dir`, so nothing upstream stops a run from
writing over the model it starts from, or into a folder that holds another run's checkpoints (which a later
`resume_from_checkpoint=True` would then pick up). Here a run has an identity, a hash of its resolved configuration
and model source stored in `<output_dir>/run.json`, and before any work:

- an `output_dir` that is a file, or that is, lies inside or contains the starting model's folder, is refused;
- a folder holding a *different* run's model or checkpoints (another identity, or none) is refused unless the user
  resumes it (`resume_from_checkpoint`: the changed fields are listed in a warning) or says
  `overwrite_output_dir: true` (its checkpoints are then removed before training, so no resume can pick them up);
- the same run's folder is resumed from its newest complete checkpoint (as transformers' example scripts do), with a
  line naming the checkpoint and its step; `resume_from_checkpoint: false` there needs `overwrite_output_dir: true`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ...utils.content import same_source
from ...utils.files import write_json
from ...utils.output_folders import OutputDirError, check_output_folder
from ...utils.types import JSONObject, JSONRead
from .files import TRAINER_STATE
from .select import CheckpointError, check_fits, checkpoint_problem, checkpoints, resolve_resume, resume_value

logger = logging.getLogger(__name__)

RUN_JSON = "run.json"
MODEL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "adapter_config.json")
# fields that change what is logged, saved or shown, never the trained weights
BOOKKEEPING = {
    "output_dir", "logging_dir", "run_name", "resume_from_checkpoint", "overwrite_output_dir", "report_to",
    "disable_tqdm", "console_format", "feasibility_window", "nonfinite_steps", "push_to_hub", "hub_model_id",
    "hub_strategy", "hub_private_repo", "hub_always_push", "hub_revision", "per_device_eval_batch_size",
    "eval_accumulation_steps", "eval_delay", "eval_on_start", "eval_steps", "eval_strategy", "eval_noise_gammas",
    "dataloader_num_workers", "dataloader_persistent_workers", "dataloader_prefetch_factor", "trackio_space_id",
    "host_allocator", "dataset_num_proc",
}  # fmt: skip
BOOKKEEPING_PREFIXES = ("logging_", "save_", "hub_", "include_")
# fields added since a release, each with the value that is all that release could run: left out while they hold it,
# so an earlier version's run, study or sweep keeps its identity and settings (`noise_modality: both` is a text-only
# model's only noise, as before; a VLM's image noise is new with it)
ADDED_UNSET: dict[str, object] = {"plugin_settings": None, "noise_modality": "both", "noise_image_sigma": None}


def model_folder(model: Any) -> str | None:
    """The local folder a model (a path, or a loaded model's `name_or_path`) was read from, else None."""
    source = model_source(model)
    return os.path.abspath(source) if isinstance(source, str) and os.path.isdir(source) else None


def model_source(model: Any) -> str | None:
    """A model's source: the path or id it is given as, or a loaded model's `name_or_path` (None: built in code)."""
    source = model if isinstance(model, str) else getattr(getattr(model, "config", None), "_name_or_path", None)
    return source or None


@dataclass(frozen=True)
class RunIdentity:
    """
    What makes a run this run (`run.json`, its one JSON form): the fields that decide the trained weights (`config`)
    and a short hash of them (`id`), the model's source, and what the run trains on where the caller knows it
    (`data`: the command line's data fields and local files, so a run resumed on other data is another run, as one
    with another seed is). The model and the data are compared only where both runs know them (a model built in code
    has no source, a trainer built from Python no data description).
    """

    id: str | None
    model: str | None
    config: JSONRead  # the settings as JSON holds them (`normalized`)
    data: JSONRead | None = None

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"id": self.id, "model": self.model, "config": self.config}
        return out if self.data is None else {**out, "data": self.data}

    @classmethod
    def from_dict(cls, data: JSONRead) -> RunIdentity:
        """A run.json as any version wrote it (missing keys: unknown)."""
        return cls(data.get("id"), data.get("model"), data.get("config") or {}, data.get("data"))

    def same_run(self, saved: RunIdentity | None) -> bool:
        """Whether `saved` (a folder's run.json) is this run: same configuration, and the same model and data where
        both name them. A run.json written when a setting that is bookkeeping now still counted (`host_allocator`
        before it did) is compared on what decides the weights."""
        if saved is None:
            return False
        if saved.id != self.id and deciding(saved.config) != self.config:
            return False
        if saved.data is not None and self.data is not None and self.data_changes(saved):
            return False
        return not (saved.model and self.model) or saved.model == self.model

    def data_changes(self, saved: RunIdentity) -> list[str]:
        """The data fields `saved` differs in, as `data.<field>` (a local source's content as `data.files.<field>`).
        A source an earlier version fingerprinted (`utils.content.legacy_fingerprint`) is compared through that
        fingerprint: all its record can tell."""
        old, new = saved.data or {}, self.data or {}
        diffs = [f"data.{k}" for k in sorted(set(old) | set(new)) if k != "files" and old.get(k) != new.get(k)]
        recorded, current = old.get("files") or {}, new.get("files") or {}
        for k in sorted(set(recorded) | set(current)):
            if recorded.get(k) != current.get(k) and not same_source(recorded.get(k), new.get(k)):
                diffs.append(f"data.files.{k}")
        return diffs

    def changes_from(self, saved: RunIdentity) -> str:
        """The fields `saved` differs in, for a refusal (at most six named)."""
        keys = sorted(set(saved.config) | set(self.config))
        diffs = [k for k in keys if saved.config.get(k) != self.config.get(k)]
        if saved.model != self.model:
            diffs.insert(0, "model")
        if saved.data is not None and self.data is not None:
            diffs[:0] = self.data_changes(saved)
        shown = ", ".join(f"`{k}`" for k in diffs[:6]) + (f" and {len(diffs) - 6} more" if len(diffs) > 6 else "")
        return shown or "none of the fields (a run.json of another format)"


def run_identity(args: Any, model: Any, data: JSONObject | None = None) -> RunIdentity:
    """The identity (`RunIdentity`) of a run of `args` from `model`, training on `data` where the caller knows it."""
    config = json.loads(json.dumps(deciding(args.to_dict()), default=str))
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    known = None if data is None else json.loads(json.dumps(data, default=str))
    return RunIdentity(digest, model_source(model), config, known)


def deciding(settings: JSONObject) -> JSONObject:
    """The settings that decide the trained weights: all but bookkeeping (paths, logging, evaluation, speed) and the
    fields added since a release while they hold what that release ran (`ADDED_UNSET`)."""
    return {
        k: v
        for k, v in settings.items()
        if k not in BOOKKEEPING
        and not k.startswith(BOOKKEEPING_PREFIXES)
        and not k.endswith("_token")
        and not (k in ADDED_UNSET and v == ADDED_UNSET[k])
    }


def _relation(output_dir: str, model_dir: str) -> str | None:
    out, src = os.path.realpath(output_dir), os.path.realpath(model_dir)
    if out == src:
        return "is"
    if out.startswith(src + os.sep):
        return "lies inside"
    if src.startswith(out + os.sep):
        return "contains"
    return None


def check_output_dir(args: Any, model: Any, resume: Any = None, identity: RunIdentity | None = None) -> RunIdentity:
    """
    Refuse an `output_dir` this run must not write to (see the module docstring); return the run's identity (given
    as `identity`, else computed from `args` and `model`). `model` is a path, a loaded model, or None (built in code);
    `resume` the `resume_from_checkpoint` training is called with. Reads only: nothing is created or removed here
    (see [`prepare_output_dir`]).
    """
    out = args.output_dir
    check_output_folder(out, "output_dir", OutputDirError)
    model_dir = model_folder(model)
    if model_dir is not None and (how := _relation(out, model_dir)):
        raise OutputDirError(
            f"`output_dir` {out} {how} the folder of the model training starts from ({model_dir}, "
            "`model_name_or_path`): saving there would overwrite or mix with that model. Choose another `output_dir`."
        )
    identity = identity or run_identity(args, model)
    resume = resume_value(resume)
    if not os.path.isdir(out):
        return identity
    saved = _read_run_json(out)
    found = [p for _, p in checkpoints(out)]
    holds_model = any(os.path.exists(os.path.join(out, name)) for name in MODEL_FILES)
    if identity.same_run(saved):
        if found and resume is False and not args.overwrite_output_dir:
            raise OutputDirError(
                f"`output_dir` {out} holds checkpoints of this same run and `resume_from_checkpoint` is false: "
                "training from step 0 would write over them. Pass `--resume_from_checkpoint true` to continue, or "
                "`--overwrite_output_dir true` to start over (its checkpoints are removed)."
            )
        return identity
    if not (found or holds_model or saved is not None):
        return identity  # other files only (logs, notes): nothing of a run to protect
    what = "another run" if saved is not None else "a run without run.json (another run, or an older version's)"
    changed = f" (it differs in {identity.changes_from(saved)})" if saved is not None else ""
    if resume not in (None, False):
        logger.warning("Resuming %s in %s with other settings%s.", what, out, changed)
        return identity
    if args.overwrite_output_dir:
        return identity
    holds = ", ".join(filter(None, [f"{len(found)} checkpoint(s)" if found else "", "a model" if holds_model else ""]))
    raise OutputDirError(
        f"`output_dir` {out} holds {holds or 'the run.json'} of {what}{changed}. Pass `--resume_from_checkpoint true` "
        "to continue that run with these settings, `--overwrite_output_dir true` to replace it (its checkpoints are "
        "removed), or choose another `output_dir`."
    )


def prepare_output_dir(args: Any, identity: RunIdentity, resume: Any = None) -> None:
    """At the start of training, on the main process: with `overwrite_output_dir` (and no resume), remove the
    folder's checkpoints unless they are this run's and resumed; then record this run's identity in `run.json`."""
    out = args.output_dir
    if args.overwrite_output_dir and resume_value(resume) in (None, False):
        for _, path in checkpoints(out):
            shutil.rmtree(path)
            logger.warning("Removed %s (`overwrite_output_dir`).", path)
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, RUN_JSON), identity.to_dict())


def auto_resume(args: Any, identity: RunIdentity, given: Any) -> str | bool | None:
    """`resume_from_checkpoint` as given; unset in the same run's folder with a complete checkpoint: True."""
    if given is not None or args.overwrite_output_dir or not os.path.isdir(args.output_dir):
        return given
    same = identity.same_run(_read_run_json(args.output_dir))
    if same and any(checkpoint_problem(p) is None for _, p in checkpoints(args.output_dir)):
        return True
    return given


def _read_run_json(folder: str) -> RunIdentity | None:
    path = os.path.join(folder, RUN_JSON)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            value = json.load(f)
    except (OSError, ValueError) as error:
        raise CheckpointError(
            f"{path} is damaged ({error}); remove it, or pass `--overwrite_output_dir true`."
        ) from None
    return RunIdentity.from_dict(value if isinstance(value, dict) else {})


@contextlib.contextmanager
def refusal_leaves_nothing(args: Any, existed: bool | None = None) -> Iterator[bool]:
    """
    Around a trainer's construction (and the checks that start training): an `output_dir` that is a file is refused
    first, and when the block fails (a refused model, data, setting or checkpoint), the folder `Trainer.__init__`
    created for it is removed again if still empty. Yields whether the folder existed before (`existed`: as recorded
    at construction).
    """
    out = args.output_dir
    check_output_folder(out, "output_dir", OutputDirError)
    existed = os.path.exists(out) if existed is None else existed
    try:
        yield existed
    except BaseException:
        if not existed and os.path.isdir(out) and not os.listdir(out):
            os.rmdir(out)
        raise


def start_run(trainer: Any, resume_from_checkpoint: str | bool | None) -> str | None:
    """
    What `train()` does before transformers' loop: the output folder checked (see the module docstring),
    `resume_from_checkpoint=True` resolved to the newest *complete* checkpoint (`select.resolve_resume`), unset the
    same run's own folder resumed, and the checkpoint checked against the run (`select.check_fits`); then, on the main
    process, the folder prepared. Returns the checkpoint to resume from (None: step 0).
    """
    args = trainer.args
    identity = getattr(trainer, "run_identity", None) or run_identity(args, trainer.model)
    with refusal_leaves_nothing(args, getattr(trainer, "output_dir_existed", True)):
        check_output_dir(args, trainer.model, resume_from_checkpoint, identity)
        resume = auto_resume(args, identity, resume_from_checkpoint)
        main = trainer.is_world_process_zero()
        checkpoint = resolve_resume(resume, args.output_dir, log=main)
        if checkpoint is not None:
            check_fits(checkpoint, trainer.model, trainer.primal_dual, args.constraints)
            with open(os.path.join(checkpoint, TRAINER_STATE)) as f:
                step = json.load(f).get("global_step")
            if main:
                logger.warning("Resuming from %s (optimizer step %s).", checkpoint, step)
    trainer.accelerator.wait_for_everyone()  # every rank has read the folder before the main one changes it
    if args.should_save:
        prepare_output_dir(args, identity, resume)
    return checkpoint
