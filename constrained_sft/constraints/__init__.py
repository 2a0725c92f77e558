"""
The constrained optimisation problem, without any Trainer (cooper's split): the descent constraints and their
Lagrangian terms (`lagrangian`), the multipliers (`multipliers`), the dual optimizer (`dual_optimizer`), the per-layer
losses of a batch and their running statistics (`stats`), the per-run primal-dual state (`primal_dual`), the
feasibility report (`feasibility`) and the state's files in checkpoints (`state_io`).

May import: `constrained_sft.utils` only. Everything else in the package builds on this folder; nothing here knows
about models, readouts, noise or trainers.
"""

from .dual_optimizer import DUAL_OPTIMIZERS, AdamDual, DualOptimizer, SGDDual, dual_optimizer_class
from .lagrangian import DescentConstraints, constraint_sums, penalty, slack
from .multipliers import Multipliers
from .primal_dual import PrimalDual
from .state_io import ConstraintStateError
from .stats import LayerLosses, LayerStats, StepStats, descent_counts, stats_metrics, step_stats

__all__ = [
    "DUAL_OPTIMIZERS",
    "AdamDual",
    "ConstraintStateError",
    "DescentConstraints",
    "DualOptimizer",
    "LayerLosses",
    "LayerStats",
    "Multipliers",
    "PrimalDual",
    "SGDDual",
    "StepStats",
    "constraint_sums",
    "descent_counts",
    "dual_optimizer_class",
    "penalty",
    "slack",
    "stats_metrics",
    "step_stats",
]
