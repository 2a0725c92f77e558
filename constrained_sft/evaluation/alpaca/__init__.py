"""
AlpacaEval, the paper's generation benchmark (Section 6), as its own product: noisy generation (`generate`,
`constrained-sft eval generate`), the judges (`judges`, with alpaca_eval configs in `judge_configs/`), head-to-head
judging and win rates (`judging`, `constrained-sft eval alpaca`), the results as types (`results`: alpaca_eval.json)
and their report (`report`: the win-rate table and plot, its part of the folder's report.html).
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
from .results import ALPACA_EVAL_SIZE, ALPACA_JSON, HeadToHead, JudgeCost, LevelAnswers, WinRateLevel

__all__ = [
    "ALPACA_EVAL_SIZE",
    "ALPACA_JSON",
    "JUDGES",
    "AlpacaArguments",
    "JudgeKind",
    "JudgeCost",
    "JudgeError",
    "LevelAnswers",
    "HeadToHead",
    "WinRateLevel",
    "build_judge",
    "check_judge",
    "judge_levels",
    "judge_setup",
    "length_controlled",
    "quiet_alpaca_eval",
    "result_lines",
    "run",
]
