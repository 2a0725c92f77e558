"""
Hyperparameter search and the paper's comparison protocol (`constrained-sft sweep`): Optuna studies per arm on a
validation split carved from the training data (`space`, `search`), retraining of the best configurations with
several seeds, test-split robustness and paired-bootstrap intervals (`compare`, with `evaluation.bootstrap`), orchestrated by `run`.

May import: utils, config, constraints, readout, noise, data, models, trainers, evaluation.
"""

from ..evaluation.bootstrap import Interval, paired_bootstrap
from .run import SweepArguments, run
from .space import SearchSpace, SearchSpaceError, load_space, parse_space

__all__ = [
    "Interval",
    "SearchSpace",
    "SearchSpaceError",
    "SweepArguments",
    "load_space",
    "paired_bootstrap",
    "parse_space",
    "run",
]
