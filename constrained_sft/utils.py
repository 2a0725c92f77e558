"""
Small helpers every layer of the package may use: finding the transformers model inside wrappers, and writing JSON
atomically. Imports nothing of the package.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from torch import nn


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


def write_json(path: str, value: Any) -> None:
    """Write `value` to `path` through a temporary file and a rename, so a reader never sees half a file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(json_safe(value), f, indent=2, sort_keys=True)
    os.replace(tmp, path)
