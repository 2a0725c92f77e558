"""
Measuring trained models, one folder per measurement over a small shared core.

The measurements, side by side (none imports another): `robustness` (`eval robustness`, every task: the headline and
layer losses against the noise level, arms compared), `alpaca` (AlpacaEval: noisy generation, judges, win rates),
`exits` (`eval exits`: what descending layers buy at inference) and `harness` (noisy lm-eval). Each holds its
arguments, its computation, its results as types (their one JSON form) and its report section.

The shared core: one paired bootstrap for any statistic (`bootstrap`), a comparison of two arms as types
(`comparisons`), the model selection by arm (`arms`), the instruction sets generation reads (`instructions`), room to
decode them (`lengths`), what a saved run recorded (`loading`) and the report writers with a report folder's one
page (`report/`), where the measurements that share a folder meet: importing this package registers every
measurement's part of that page.

May import: everything below it (`config`, `utils`, `constraints`, `readout`, `noise`, `data`, `models`, `trainers`,
`tasks`, `comparison`); never `sweep` or `cli`. The runnable harness that reproduces the paper's comparisons lives outside the
package, in `eval/`.
"""

# each measurement imported here registers its part of a report folder's page (`report.page.PARTS`)
from .alpaca import ALPACA_EVAL_SIZE, ALPACA_JSON, HeadToHead, JudgeCost, WinRateLevel
from .bootstrap import Interval, Statistic, paired_bootstrap, verdict
from .comparisons import Band, Comparison, Difference, StatisticRow
from .exits import EXITS_JSON, ExitsModel, ExitSpeedup, ExitsResults, ExitsSettings, LayerReadout, PromptMeasurements
from .harness import HARNESS_JSON, HarnessResults, HarnessSettings
from .robustness import (
    RESULTS_JSON,
    LevelResult,
    LevelSummary,
    ModelResult,
    ModelSummary,
    ReportFiles,
    RobustnessArguments,
    RobustnessResults,
    RobustnessSettings,
    auc,
    compare,
    evaluate_level,
    run,
    saved_results,
    statistics,
    summarize,
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
    "Interval",
    "JudgeCost",
    "LayerReadout",
    "LevelResult",
    "LevelSummary",
    "ModelResult",
    "ModelSummary",
    "PromptMeasurements",
    "ReportFiles",
    "RobustnessArguments",
    "RobustnessResults",
    "RobustnessSettings",
    "Statistic",
    "StatisticRow",
    "WinRateLevel",
    "auc",
    "compare",
    "evaluate_level",
    "paired_bootstrap",
    "run",
    "saved_results",
    "statistics",
    "summarize",
    "verdict",
]
