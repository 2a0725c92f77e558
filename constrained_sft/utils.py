"""
Small helpers every layer of the package may use: finding the transformers model inside wrappers, checking a
dataclass's fields against their types, writing files (and figures) atomically, and cutting frames into patches and
back. Imports nothing of the package.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import tempfile
import types
import typing
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .version import VERSION  # noqa: F401 - re-exported: results and reports read it from here

if TYPE_CHECKING:
    from torch import nn


def cache_root() -> str:
    """`$CONSTRAINED_SFT_CACHE`, else `$XDG_CACHE_HOME/constrained-sft`, else `~/.cache/constrained-sft`."""
    if "CONSTRAINED_SFT_CACHE" in os.environ:
        return os.environ["CONSTRAINED_SFT_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    return os.path.join(base, "constrained-sft")


def unwrap_model(model: nn.Module) -> nn.Module:
    """The transformers model inside PEFT / DDP / compile wrappers."""
    from torch import nn  # here, not at the top: `import constrained_sft.utils` (the CLI's help) stays torch-free

    for _ in range(4):
        if hasattr(model, "get_base_model"):
            model = model.get_base_model()
        elif hasattr(model, "module") and isinstance(model.module, nn.Module):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            break
    return model


def zero3_gathered(*params: nn.Parameter | None):
    """
    TRL's `maybe_gather_lm_head_ctx` (gather under DeepSpeed ZeRO-3, else a no-op) for the parameters ZeRO-3 has
    converted (they carry `ds_id`). A model built before the config enabled ZeRO-3 (outside `deepspeed.zero.Init`)
    keeps whole, plain parameters until the trainer prepares it, and the trainer measures it before that (sigma_x):
    TRL's helper would fail on them, and they need no gather.
    """
    from trl.trainer.utils import maybe_gather_lm_head_ctx

    return maybe_gather_lm_head_ctx(*[p for p in params if p is not None and hasattr(p, "ds_id")])


def check_fields(instance: Any, owner: type | tuple[type, ...] | None = None) -> None:
    """
    Refuse, naming the field, a value of the wrong kind in a dataclass field: the field's annotation is the contract
    (`int` is an integer and not a bool, `float` a finite number, `str` a string among the field's `choices` if it
    has them, `list[X]` a list of X, `X | None` also None, a union any of its members; a field whose default is None
    may stay None: a command that requires it says so). Fields declared by `owner`
    (default: the instance's class and its bases) are checked; `Any`, dicts and other types are left to the field's
    own validation. Called first in `__post_init__`, so a value of the wrong kind never reaches a range check or a
    library call that would fail with a message naming no field.
    """
    classes = owner if isinstance(owner, tuple) else (owner or type(instance),)
    for cls in classes:
        hints = typing.get_type_hints(cls)
        own = cls.__dict__.get("__annotations__", {}) if owner is not None else hints
        for field in dataclasses.fields(cls):
            if field.name not in own or field.name not in hints:
                continue
            value = getattr(instance, field.name)
            if value is None and field.default is None:  # a field the command requires: it says so itself
                continue
            if not _matches(value, hints[field.name]):
                raise ValueError(
                    f"`{field.name}` must be {_describe(hints[field.name])}, got {value!r} ({type(value).__name__})."
                )
            choices = field.metadata.get("choices")
            if choices and isinstance(value, str) and value not in choices:
                raise ValueError(f"`{field.name}` must be one of {list(choices)}, got {value!r}.")


def _matches(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, member) for member in typing.get_args(hint))
    if origin in (list, tuple):
        (item, *_) = typing.get_args(hint) or (Any,)
        return isinstance(value, (list, tuple)) and all(_matches(v, item) for v in value)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    return True  # Any, dicts, enums: the field's own validation decides


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(member) for member in typing.get_args(hint))
    if origin in (list, tuple):
        (item, *_) = typing.get_args(hint) or (Any,)
        return f"a list of {_describe(item).removeprefix('a ').removeprefix('an ')}s"
    names = {type(None): "None", bool: "a boolean (true / false)", int: "an integer", float: "a finite number"}
    return names.get(hint, "a string" if hint is str else getattr(hint, "__name__", str(hint)))


def json_safe(value: Any) -> Any:
    """Floats JSON cannot hold (nan, inf) become strings; containers are converted recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """
    A temporary path beside `path` to write to; renamed over `path` (after an fsync) only when the block succeeds, so
    a reader, or a run killed mid-write, sees the old file or the new one, never half of one. A kill can leave the
    temporary behind; the next write of `path` reuses and consumes it.
    """
    tmp = f"{path}.tmp"
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_text(path: str, text: str) -> None:
    """Write `text` to `path` atomically (see [`atomic_path`])."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write(text)


def write_json(path: str, value: Any) -> None:
    """Write `value` as indented JSON to `path` atomically (see [`atomic_path`])."""
    write_text(path, json.dumps(json_safe(value), indent=2, sort_keys=True))


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str, dpi: int = 120) -> str:
    """Lay out, write `fig` to `path` atomically (format from the extension) and close it."""
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format=os.path.splitext(path)[1][1:])
    pyplot().close(fig)
    return path


def patchify(frames, patch: int):
    """Frames `[..., H, W]` -> non-overlapping row-major patches `[..., (H/p)(W/p), p*p]` (a view when possible)."""
    *lead, H, W = frames.shape
    x = frames.reshape(*lead, H // patch, patch, W // patch, patch).movedim(-3, -2)  # [..., H/p, W/p, p, p]
    return x.reshape(*lead, (H // patch) * (W // patch), patch * patch)


def unpatchify(patches, patch: int, height: int, width: int):
    """The inverse of [`patchify`]: `[..., (H/p)(W/p), p*p]` -> `[..., H, W]`."""
    *lead, _, _ = patches.shape
    x = patches.reshape(*lead, height // patch, width // patch, patch, patch).movedim(-2, -3)
    return x.reshape(*lead, height, width)


def percent(text: str) -> str:
    """`text` with every lone '%' doubled, for argparse's help formatting."""
    return re.sub(r"%%|%\((?=\w+\)s)|%", lambda m: m.group(0) if m.group(0) != "%" else "%%", text)


def read_yaml(path: str, flag: str) -> Any:
    """
    The YAML file at `path`, read strictly: a syntax error (a tab in the indentation, an unclosed bracket) or a key
    given twice in one mapping is refused as `ValueError` naming `flag`, the file, and the line and column, instead of
    a parser traceback or the last duplicate silently winning.
    """
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    mark = key_node.start_mark
                    raise ValueError(
                        f"`{flag}` {path}:{mark.line + 1}:{mark.column + 1}: key {key!r} is given twice (first on line "
                        f"{seen[key] + 1}); give each key once."
                    )
                seen[key] = key_node.start_mark.line
            return super().construct_mapping(node, deep=deep)

    try:
        with open(path, encoding="utf-8") as f:
            return yaml.load(f, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except UnicodeDecodeError as error:
        raise ValueError(f"`{flag}` {path} is not UTF-8 text ({error.reason} at byte {error.start}).") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ValueError(f"`{flag}` {path}{where}: not valid YAML ({problem}).") from None


def read_json(path: str, flag: str, error: type[ValueError] = ValueError, jsonl: bool = False) -> Any:
    """A JSON file (`jsonl`: a list, one value per non-blank line), refused in one line naming `flag` and the place
    of the problem as `file:line:column`, as YAML errors are."""
    try:
        with open(path, encoding="utf-8") as f:
            if not jsonl:
                return json.load(f)
            lines = list(f)
        rows = []
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as problem:
                    raise error(f"`{flag}` {path}:{number}:{problem.colno}: not valid JSON ({problem.msg}).") from None
        return rows
    except UnicodeDecodeError as problem:
        raise error(f"`{flag}` {path} is not UTF-8 text ({problem.reason} at byte {problem.start}).") from None
    except json.JSONDecodeError as problem:
        raise error(f"`{flag}` {path}:{problem.lineno}:{problem.colno}: not valid JSON ({problem.msg}).") from None


def plain_name(name: object, flag: str, error: type[ValueError] = ValueError) -> str:
    """`name` as given when it can name a file or folder inside another: refused, naming `flag`, unless a non-empty
    string without a path separator ('/' or '\\') or a control character that does not start with '.' (no '.',
    '..' or hidden names)."""
    if (
        not isinstance(name, str)
        or not name.strip()
        or name.startswith(".")
        or any(c in name for c in "/\\")
        or any(ord(c) < 32 for c in name)
    ):
        raise error(
            f"`{flag}` {name!r} names a folder or file: give a plain name (no path separator '/' or '\\', not "
            "starting with '.', not empty)."
        )
    return name


def child_path(parent: str, *parts: str) -> str:
    """`os.path.join(parent, *parts)`, refused (`ValueError`) when it would lie outside `parent` (a part that is a
    path or '..'): every folder a name builds stays inside its parent."""
    path = os.path.join(parent, *parts)
    root = os.path.realpath(parent)
    if os.path.commonpath([root, os.path.realpath(path)]) != root or any(not p or p in (".", "..") for p in parts):
        raise ValueError(f"{path!r} would lie outside {parent!r}: names that build folders must be plain names.")
    return path


class OutputDirError(ValueError):
    """An `output_dir` a run must not write to; the message names the folder, why, and the flag that allows it."""


def check_output_folder(path: str | None, flag: str, error: type[ValueError] = ValueError) -> None:
    """
    An output folder that cannot be written is refused before any work, naming `flag`: an empty path, an existing
    file, a path below a file, or a missing folder that cannot be created where it would be (a read-only file system,
    a virtual one like /proc). A missing folder is not created here: a uniquely named folder is made and removed in
    its nearest existing parent (so ranks of one launch probing the same path at once do not race). None: unset,
    left to the caller's own "required" check.
    """
    if path is None:
        return
    if not str(path).strip():
        raise error(f"`{flag}` is empty; give a folder (it is created if missing).")
    if os.path.isdir(path):
        if not os.access(path, os.W_OK | os.X_OK):
            raise error(f"`{flag}` {path} is a folder this user cannot write to; give another folder.")
        return
    if os.path.exists(path):
        raise error(f"`{flag}` {path} is an existing file; give a folder (it is created if missing).")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise error(f"`{flag}` {path} lies below {parent}, which is a file; give a folder (it is created if missing).")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".constrained-sft-probe-", dir=parent))
    except OSError as problem:
        raise error(
            f"`{flag}` {path} cannot be created in {parent} ({problem.strerror}); give a folder you can write to."
        ) from None
