"""
Every result the evaluations produce, as types with their one JSON form (`to_dict` / `from_dict`; the layouts
earlier versions wrote, so the published results load): comparisons between arms (`comparisons`), a robustness
evaluation (`robustness`), the exit-layer measurements (`exits`), a noisy lm-eval run (`harness`) and a head-to-head
judging (`headtohead`). Reports read their attributes; a key a reader does not know is an error naming it.
"""

from .comparisons import Band, Comparison, Difference, StatisticRow
from .exits import EXITS_JSON, ExitsModel, ExitSpeedup, ExitsResults, ExitsSettings, LayerReadout, PromptMeasurements
from .harness import HARNESS_JSON, HarnessResults, HarnessSettings
from .headtohead import ALPACA_EVAL_SIZE, ALPACA_JSON, HeadToHead, JudgeCost, WinRateLevel
from .robustness import (
    RESULTS_JSON,
    LevelSummary,
    ModelResult,
    ModelSummary,
    ReportFiles,
    RobustnessResults,
    RobustnessSettings,
)

__all__ = [
    "ALPACA_EVAL_SIZE",
    "ALPACA_JSON",
    "EXITS_JSON",
    "HARNESS_JSON",
    "RESULTS_JSON",
    "Band",
    "Comparison",
    "Difference",
    "ExitSpeedup",
    "ExitsModel",
    "ExitsResults",
    "ExitsSettings",
    "HarnessResults",
    "HarnessSettings",
    "HeadToHead",
    "JudgeCost",
    "LayerReadout",
    "LevelSummary",
    "ModelResult",
    "ModelSummary",
    "PromptMeasurements",
    "ReportFiles",
    "RobustnessResults",
    "RobustnessSettings",
    "StatisticRow",
    "WinRateLevel",
]
