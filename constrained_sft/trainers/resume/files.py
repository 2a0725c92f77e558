"""
Every file this package adds to a checkpoint, its name and its format. The primal-dual state: multipliers and
dual-optimizer moments in safetensors, settings and recent history in JSON, never pickle; both written atomically
with a format version, and reading either refuses, naming the file, what a killed save, a copy gone wrong or another
version of the library can leave behind. The completion marker (`checkpoint_complete.json`, written last, with every
file's size) and the training arguments as JSON (`training_args.json`, in place of transformers' pickle).
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ...constraints import ConstraintStateError, PrimalDual
from ...utils.files import atomic_path, write_json
from ...utils.types import JSONObject, JSONRead, StateDict

if TYPE_CHECKING:
    from transformers import TrainingArguments

STATE_TENSORS = "constraint_state.safetensors"
STATE_JSON = "constraint_state.json"
FORMAT_VERSION = 1  # of `STATE_JSON`; a file without the field predates it and reads as version 1
ARGS_JSON = "training_args.json"  # written by every save, in place of transformers' pickled training_args.bin
MARKER = "checkpoint_complete.json"
TRAINER_STATE = "trainer_state.json"


def to_files(state: StateDict) -> tuple[dict[str, torch.Tensor], JSONObject]:
    """
    `PrimalDual.state_dict()` as the checkpoint's two parts: tensors for safetensors (`multipliers`, `relaxation`,
    `optimizer.<name>` for the torch optimizer's per-parameter tensors, `extra.<name>` for the dual optimizer's own) and the rest for JSON (format version 1).
    """
    dual = state["dual_optimizer"]
    tensors = {"multipliers": dual["multipliers"]}
    if dual["relaxation"] is not None:
        tensors["relaxation"] = dual["relaxation"]
    per_param = dual["optimizer"]["state"].get(0, {})
    tensors.update({f"optimizer.{k}": v.detach() for k, v in per_param.items() if torch.is_tensor(v)})
    tensors.update({f"extra.{k}": v for k, v in dual.get("extra", {}).items()})
    meta = {
        **{k: v for k, v in dual.items() if k in ("kind", "resilience", "explicit_relaxation")},
        "param_groups": [{k: v for k, v in g.items() if k != "params"} for g in dual["optimizer"]["param_groups"]],
        "scalars": {k: v for k, v in per_param.items() if not torch.is_tensor(v)},
    }
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    return tensors, {**state, "dual_optimizer": meta}


def from_files(tensors: dict[str, torch.Tensor], meta: JSONRead) -> StateDict:
    """The inverse of `to_files`: a state for `PrimalDual.load_state_dict` (`meta` as JSON holds it; the
    multipliers' own `load_state_dict` checks what it reads)."""
    saved = meta["dual_optimizer"]
    per_param = {k.removeprefix("optimizer."): v for k, v in tensors.items() if k.startswith("optimizer.")}
    per_param.update(saved.get("scalars", {}))
    dual = {
        "kind": saved.get("kind"),
        "resilience": saved.get("resilience"),
        "explicit_relaxation": saved.get("explicit_relaxation", False),
        "multipliers": tensors["multipliers"],
        "relaxation": tensors.get("relaxation"),
        "extra": {k.removeprefix("extra."): v for k, v in tensors.items() if k.startswith("extra.")},
        "optimizer": {
            "state": {0: per_param} if per_param else {},
            "param_groups": [{**g, "params": [i]} for i, g in enumerate(saved["param_groups"])],
        },
    }
    return {**{k: v for k, v in meta.items() if k != "format_version"}, "dual_optimizer": dual}


def save_state(primal_dual: PrimalDual, directory: str) -> None:
    """Tensors first, then the JSON that describes them; each file appears whole or not at all."""
    os.makedirs(directory, exist_ok=True)
    tensors, meta = to_files(primal_dual.state_dict())
    with atomic_path(os.path.join(directory, STATE_TENSORS)) as tmp:
        save_file(tensors, tmp)
    write_json(os.path.join(directory, STATE_JSON), {"format_version": FORMAT_VERSION, **meta})


def read_state(directory: str) -> tuple[dict[str, torch.Tensor], JSONRead]:
    """
    The tensors and settings saved in `directory`, checked for what a reader can check without a run: both files
    present, whole and of a format this version reads. Raises [`ConstraintStateError`] naming the file otherwise.
    """
    json_path, tensor_path = os.path.join(directory, STATE_JSON), os.path.join(directory, STATE_TENSORS)
    for path in (json_path, tensor_path):
        if not os.path.isfile(path):
            raise ConstraintStateError(
                f"{path} is missing: this checkpoint holds no constraint state (multipliers and dual optimizer), so "
                "it was not written by a constrained trainer or its save was cut short. Resume from a complete "
                "checkpoint of the constrained run, or start a new run from the weights."
            )
    try:
        with open(json_path) as f:
            meta = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConstraintStateError(
            f"{json_path} is truncated or not JSON ({error.msg if hasattr(error, 'msg') else error}): the save that "
            "wrote it was cut short. Resume from an earlier checkpoint."
        ) from None
    version = meta.get("format_version", 1) if isinstance(meta, dict) else None
    if not isinstance(version, int) or not isinstance(meta.get("spec"), dict) or "dual_optimizer" not in meta:
        raise ConstraintStateError(
            f"{json_path} is not a constraint state written by constrained-sft (expected the keys 'format_version', "
            f"'spec' and 'dual_optimizer', got {sorted(meta) if isinstance(meta, dict) else type(meta).__name__})."
        )
    if version > FORMAT_VERSION:
        raise ConstraintStateError(
            f"{json_path} has format_version {version}, written by a newer constrained-sft; this version reads "
            f"format_version <= {FORMAT_VERSION}. Upgrade constrained-sft to resume this run."
        )
    try:
        tensors = load_file(tensor_path)
    except (SafetensorError, OSError) as error:
        raise ConstraintStateError(
            f"{tensor_path} is truncated or damaged ({error}): the save that wrote it was cut short. Resume from an "
            "earlier checkpoint."
        ) from None
    if "multipliers" not in tensors:
        raise ConstraintStateError(f"{tensor_path} holds no 'multipliers' tensor (it has {sorted(tensors)}).")
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ConstraintStateError(
                f"{tensor_path}: '{name}' holds non-finite values ({tensor.tolist()}); resuming would train a NaN "
                "model. Resume from an earlier checkpoint."
            )
    for name in ("multipliers", "relaxation"):
        if name in tensors and bool((tensors[name] < 0).any()):
            raise ConstraintStateError(
                f"{tensor_path}: '{name}' must be >= 0 (Lagrange multipliers of inequality constraints), got "
                f"{tensors[name].tolist()}. Resume from an earlier checkpoint."
            )
    return tensors, meta


def load_state(primal_dual: PrimalDual, directory: str) -> None:
    """Restore `primal_dual` from `directory`; a state for other constraints is refused naming the file."""
    tensors, meta = read_state(directory)
    try:
        primal_dual.load_state_dict(from_files(tensors, meta))
    except (ValueError, KeyError, TypeError) as error:  # another constraint layout, or a hand-edited file
        raise ConstraintStateError(f"{os.path.join(directory, STATE_JSON)}: {error}") from None


def mark_complete(directory: str, global_step: int) -> None:
    """Written last, by the main process, once every rank has saved: the folder is whole from here on. The size of
    every file is recorded, so a file truncated or replaced later is found before resuming."""
    files = sorted(name for name in os.listdir(directory) if name != MARKER)
    sizes = {name: os.path.getsize(os.path.join(directory, name)) for name in files}
    write_json(os.path.join(directory, MARKER), {"global_step": global_step, "files": files, "sizes": sizes})


def file_problem(path: str, size: int | None) -> str | None:
    """None if the checkpoint file at `path` reads as what its name says, else what is wrong. Cheap: sizes, JSON,
    the safetensors header, the zip directory of a `torch.save` file; never the tensors themselves."""
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


def write_training_args(args: TrainingArguments, output_dir: str) -> None:
    """
    The training arguments as JSON (`*_token` secrets masked by `to_dict()`; the tokenizer's own `eos_token` and
    `pad_token` are no secret), replacing the pickled `training_args.bin` transformers writes, which holds the
    arguments as a Python object, a Hub token in clear included, and can only be read by unpickling.
    """
    pickled = os.path.join(output_dir, "training_args.bin")
    if os.path.exists(pickled):
        os.remove(pickled)
    settings = args.to_dict()
    settings.update({k: getattr(args, k) for k in ("eos_token", "pad_token") if hasattr(args, k)})
    write_json(os.path.join(output_dir, ARGS_JSON), settings)
