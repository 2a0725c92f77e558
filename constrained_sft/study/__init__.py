"""
The constrained-vs-ERM study of an LLM recipe (`constrained-sft study`, the paper's Section 6 in one command):
training seeds per arm, robustness with intervals, noisy answers judged head to head in both orders, one report.

May import: everything below `sweep` (utils, launch, config, constraints, readout, noise, data, models, trainers, tasks,
comparison, evaluation); only `cli` imports it.

Importing the package loads none of its modules: `STAGES`, `StudyArguments` and `run` are imported on first read (PEP
562, as the top-level package does), so `benchmarks/study_package.py` (gpu_study.sh's questions before any work)
pays for the training stack only where a question needs it (`check`: 0.04 s, not 6).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {"STAGES": "arguments", "StudyArguments": "arguments", "run": "conduct"}

if TYPE_CHECKING:
    from .arguments import STAGES, StudyArguments
    from .conduct import run


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)


__all__ = ["STAGES", "StudyArguments", "run"]
