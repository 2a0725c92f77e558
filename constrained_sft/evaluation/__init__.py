"""
Measuring trained models, by hand or from the command line: robustness against embedding noise through the
trainers' own scoring path (`robustness`, with its arithmetic in `metrics`), loading the models compared
(`loading`), reports with plots and HTML (`report`), noisy generation (`generate`) and AlpacaEval head-to-head
judging (`alpaca`, with the judges in `judges` and their alpaca_eval configs in `judge_configs/`).

May import: everything below it (`config`, `utils`, `constraints`, `readout`, `noise`, `data`, `models`, `trainers`); never
`cli`. The runnable harness that reproduces the paper's comparisons lives outside the package, in `eval/`.
"""

from .loading import ModelSpec, build_classifier, load_model
from .metrics import LevelResult, auc, differences, summarize
from .robustness import RobustnessArguments, classifier_eval_trainer, eval_trainer, evaluate_level

__all__ = [
    "LevelResult",
    "ModelSpec",
    "build_classifier",
    "RobustnessArguments",
    "auc",
    "classifier_eval_trainer",
    "differences",
    "eval_trainer",
    "evaluate_level",
    "load_model",
    "summarize",
]
