"""
Hyperparameter search and the paper's comparison protocol (`constrained-sft sweep`), task-agnostic: Optuna studies
per arm on a validation carve-off of the training data (`space`, `search`), retraining of the best configurations with
several seeds, held-out robustness with paired-bootstrap intervals through the evaluation's one comparison
(`compare`), orchestrated by `run`. The task supplies the data, the trainers and the headline's direction.

May import: utils, launch, config, constraints, readout, noise, data, models, trainers, tasks, comparison, evaluation.
"""

from .arguments import SweepArguments
from .objectives import SWEEP_OBJECTIVES
from .run import run
from .search import Objective
from .space import SearchSpace, SearchSpaceError, check_ranges, load_space, parse_space

__all__ = [
    "Objective",
    "SearchSpace",
    "SearchSpaceError",
    "SWEEP_OBJECTIVES",
    "SweepArguments",
    "check_ranges",
    "load_space",
    "parse_space",
    "run",
]
