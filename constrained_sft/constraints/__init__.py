"""
The constrained optimisation problem, without any Trainer (cooper's split): the descent constraints and their
Lagrangian terms (`lagrangian`), what the measured layers add to the loss (`objectives`: the Lagrangian, its
augmented form or fixed early-exit weights), the multipliers (`multipliers`), the dual optimizers (`dual_optimizer`:
the base, plain ascent and none; `dual_methods`: nuPI and the augmented Lagrangian),
the training modes (`modes`: descent, penalty, early exit, none), the variants' settings (`settings`), the per-layer
losses of a batch and their running statistics (`stats`), the per-run primal-dual state
(`primal_dual`), the feasibility report (`feasibility`). The state round-trips through `state_dict()` / `load_state_dict()`; writing it
to a checkpoint's files is the trainers' (`trainers/resume/files.py`).

May import: `constrained_sft.utils` and cooper (its nuPI optimizer) only. Everything else in the package builds on this folder; nothing here knows
about models, readouts, noise or trainers.
"""

from .dual_methods import AugmentedLagrangianDual, NuPIDual  # registered after SGD and Adam (it imports them)
from .dual_optimizer import DUAL_OPTIMIZERS, AdamDual, DualOptimizer, FixedDual, SGDDual, dual_optimizer_class
from .feasibility import FeasibilityReport
from .lagrangian import DescentConstraints, constraint_values, penalty
from .modes import ERM, MODES, Mode, mode_of
from .multipliers import Multipliers
from .objectives import EARLY_EXIT_SCALES, AugmentedLagrangian, EarlyExit, Lagrangian, LayerObjective
from .primal_dual import ConstraintStateError, PrimalDual
from .stats import LayerLosses, LayerStats, LayerTotals, StepStats, descent_counts, stats_metrics, step_stats
from .variants import BY_FIELD, HasSettings, Setting, settings_of

__all__ = [
    "BY_FIELD",
    "DUAL_OPTIMIZERS",
    "EARLY_EXIT_SCALES",
    "ERM",
    "AdamDual",
    "AugmentedLagrangian",
    "AugmentedLagrangianDual",
    "ConstraintStateError",
    "DescentConstraints",
    "FeasibilityReport",
    "HasSettings",
    "DualOptimizer",
    "EarlyExit",
    "FixedDual",
    "Lagrangian",
    "LayerLosses",
    "LayerObjective",
    "LayerStats",
    "LayerTotals",
    "MODES",
    "Mode",
    "Multipliers",
    "NuPIDual",
    "PrimalDual",
    "SGDDual",
    "Setting",
    "settings_of",
    "StepStats",
    "constraint_values",
    "descent_counts",
    "dual_optimizer_class",
    "mode_of",
    "penalty",
    "stats_metrics",
    "step_stats",
]
