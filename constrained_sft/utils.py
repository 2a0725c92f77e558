"""
Small helpers every layer of the package may use: finding the transformers model inside wrappers, writing files
(and figures) atomically, and cutting frames into patches and back. Imports nothing of the package.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from typing import Any

from torch import nn

VERSION = "0.1.0"  # the package version (pyproject.toml says the same; a test checks)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The transformers model inside PEFT / DDP / compile wrappers."""
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
