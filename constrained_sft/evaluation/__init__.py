"""
Measuring trained models, for every task at once: one robustness run (`robustness`) whose per-level loop (`levels`)
scores held-out batches through the task's own training code path, the arithmetic of a level grid and a model's
summary (`metrics`), one paired bootstrap for any statistic (`bootstrap`), the comparisons between arms of models
with their intervals and verdicts (`compare`), the results as types with their one JSON form (`results`), what a
saved run recorded (`loading`), and the reports, one writer per format (`report/`). AlpacaEval (noisy generation, judges, win rates) is its own subfolder, `alpaca`.

May import: everything below it (`config`, `utils`, `constraints`, `readout`, `noise`, `data`, `models`, `trainers`,
`tasks`, `comparison`); never `sweep` or `cli`. The runnable harness that reproduces the paper's comparisons lives outside the
package, in `eval/`.
"""

from .bootstrap import Interval, Statistic, paired_bootstrap, verdict
from .compare import compare, statistics
from .levels import LevelResult, evaluate_level
from .metrics import auc, summarize
from .results import Comparison, RobustnessResults
from .robustness import RobustnessArguments, run, saved_results

__all__ = [
    "Comparison",
    "Interval",
    "LevelResult",
    "RobustnessArguments",
    "RobustnessResults",
    "Statistic",
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
