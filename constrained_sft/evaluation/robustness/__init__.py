"""
Robustness evaluation for every task (`constrained-sft eval robustness`), in one folder: its options (`arguments`),
the command (`command`), one model's measurement apart from the command (`measure`, which a study calls right after
training), one level through the task's training code path (`levels`), the arithmetic of a grid and a model's summary
(`metrics`), the comparisons between arms (`compare`), the results as types and the folder that holds them
(`results`: results.json, `RobustnessFolder`) and their report
(`report`: results.csv, the plots of `plots`, its part of the folder's report.html).
"""

from .arguments import RobustnessArguments
from .command import console_lines, run, saved_results
from .compare import arm_scores, bands, compare, statistics
from .levels import LevelResult, evaluate_level
from .measure import Measurement, finish, measure_model
from .metrics import auc, summarize
from .report import robustness_blocks, summary_table, write_csv, write_report
from .results import (
    RESULTS_JSON,
    LevelSummary,
    ModelResult,
    ModelSummary,
    ReportFiles,
    RobustnessFolder,
    RobustnessResults,
    RobustnessSettings,
)

__all__ = [
    "RESULTS_JSON",
    "LevelResult",
    "LevelSummary",
    "Measurement",
    "ModelResult",
    "ModelSummary",
    "ReportFiles",
    "RobustnessArguments",
    "RobustnessFolder",
    "RobustnessResults",
    "RobustnessSettings",
    "arm_scores",
    "auc",
    "bands",
    "compare",
    "console_lines",
    "evaluate_level",
    "finish",
    "measure_model",
    "robustness_blocks",
    "run",
    "saved_results",
    "statistics",
    "summarize",
    "summary_table",
    "write_csv",
    "write_report",
]
