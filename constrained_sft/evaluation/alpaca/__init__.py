"""
AlpacaEval, the paper's generation benchmark (Section 6), as its own product: noisy generation (`generate`,
`constrained-sft eval generate`), the judges (`judge_registry`: one class per `--judge` kind; `annotator_configs`: the
alpaca_eval configs of `judge_configs/` and their completion functions; `verdict_journal`: every API verdict kept as it
arrives), head-to-head judging and win rates (`judge_command`, `constrained-sft eval alpaca`), the results as types (`results`: alpaca_eval.json)
and their report (`report`: the win-rate table and plot, its part of the folder's report.html); the two commands'
folders as typed objects (`folders`: `AnswersFolder`, `VerdictsFolder`), through which the study reads them.
"""

from .answer_folders import AnswersFolder, VerdictsFolder
from .generate import GenerateArguments
from .generate import run as generate_answers  # `eval generate` (not `generate`: the module keeps its name)
from .judge_command import (
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
from .judge_registry import JUDGES, JudgeKind, judges_help
from .report import cost_text, judge_label, level_table, plot_win_rates
from .results import ALPACA_EVAL_SIZE, ALPACA_JSON, HeadToHead, JudgeCost, LevelAnswers, WinRateLevel

__all__ = [
    "ALPACA_EVAL_SIZE",
    "ALPACA_JSON",
    "JUDGES",
    "AlpacaArguments",
    "AnswersFolder",
    "GenerateArguments",
    "JudgeKind",
    "JudgeCost",
    "JudgeError",
    "LevelAnswers",
    "HeadToHead",
    "VerdictsFolder",
    "WinRateLevel",
    "build_judge",
    "check_judge",
    "cost_text",
    "generate_answers",
    "judge_label",
    "judge_levels",
    "judge_setup",
    "judges_help",
    "length_controlled",
    "level_table",
    "plot_win_rates",
    "quiet_alpaca_eval",
    "result_lines",
    "run",
]
