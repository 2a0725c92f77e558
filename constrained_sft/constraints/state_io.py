"""
The primal-dual state in checkpoints: multipliers and dual-optimizer moments in safetensors, settings and recent
history in JSON, never pickle. The end-of-training report's file name lives here too.
"""

from __future__ import annotations

import json
import os

from safetensors.torch import load_file, save_file

from ..utils import write_json
from .primal_dual import PrimalDual

STATE_TENSORS = "constraint_state.safetensors"
STATE_JSON = "constraint_state.json"
REPORT = "constraints.json"


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
