"""
AlpacaEval, the paper's generation benchmark (Section 6), as its own product: noisy generation (`generate`,
`constrained-sft eval generate`), the judges (`judges`, with alpaca_eval configs in `judge_configs/`), head-to-head
judging and win rates (`judging`, `constrained-sft eval alpaca`) and their part of the report folder (`report`).
"""

from .judge_kinds import JUDGES, JudgeKind
from .judging import (
    AlpacaArguments,
    JudgeError,
    build_judge,
    check_judge,
    judge_levels,
    judge_setup,
    length_controlled,
    quiet_alpaca_eval,
    result_lines,
    run,
)

__all__ = [
    "JUDGES",
    "AlpacaArguments",
    "JudgeKind",
    "JudgeError",
    "build_judge",
    "check_judge",
    "judge_levels",
    "judge_setup",
    "length_controlled",
    "quiet_alpaca_eval",
    "result_lines",
    "run",
]
