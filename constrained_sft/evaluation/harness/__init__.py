"""
Noisy evaluation through EleutherAI's lm-evaluation-harness (`pip install 'constrained-sft[harness]'`), in one
folder: its options (`arguments`), the command (`command`: every model, task, level and noise seed, the arms compared),
the noisy lm-eval model (`model`), the entry point for lm-eval's own command line (`lm_eval_cli`), the offline tasks
(`tasks/`), the results as types (`results`) and their report (`report`). Importing this folder needs no lm-eval:
`model` imports it, and only `command` and `lm_eval_cli` import `model`, when they run.
"""

from .results import HARNESS_JSON, HarnessFolder, HarnessResults, HarnessSettings

__all__ = ["HARNESS_JSON", "HarnessFolder", "HarnessResults", "HarnessSettings"]
