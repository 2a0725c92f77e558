"""Saving and restoring the primal-dual state with checkpoints (safetensors + JSON, never pickle)."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from safetensors.torch import load_file, save_file

from .primal_dual import PrimalDual

STATE_TENSORS = "constraint_state.safetensors"
STATE_JSON = "constraint_state.json"
REPORT = "constraints.json"


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
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(json_safe(value), f, indent=2, sort_keys=True)
    os.replace(tmp, path)


def save_state(primal_dual: PrimalDual, directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    save_file(
        {k: v.contiguous() for k, v in primal_dual.state_tensors().items()}, os.path.join(directory, STATE_TENSORS)
    )
    write_json(os.path.join(directory, STATE_JSON), primal_dual.state_json())


def has_state(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, STATE_TENSORS)) and os.path.isfile(
        os.path.join(directory, STATE_JSON)
    )


def load_state(primal_dual: PrimalDual, directory: str) -> None:
    with open(os.path.join(directory, STATE_JSON)) as f:
        meta = json.load(f)
    primal_dual.load_state(load_file(os.path.join(directory, STATE_TENSORS)), meta)
