"""
The constrained optimisation problem, without any Trainer (cooper's split): the descent constraints and their
Lagrangian terms (`lagrangian`), what the measured layers add to the loss (`objectives`: the Lagrangian, its
augmented form or fixed early-exit weights), the multipliers (`multipliers`), the dual optimizer (`dual_optimizer`),
the per-layer losses of a batch and their running statistics (`stats`), the per-run primal-dual state
(`primal_dual`), the feasibility report (`feasibility`). The state round-trips through `state_dict()` / `load_state_dict()`; writing it
to a checkpoint's files is the trainers' (`trainers/resume/files.py`).

May import: `constrained_sft.utils` and cooper (its nuPI optimizer) only. Everything else in the package builds on this folder; nothing here knows
about models, readouts, noise or trainers.
"""

from .dual_optimizer import (
    DUAL_OPTIMIZERS,
    AdamDual,
    AugmentedLagrangianDual,
    DualOptimizer,
    FixedDual,
    NuPIDual,
    SGDDual,
    dual_optimizer_class,
)
from .lagrangian import DescentConstraints, constraint_values, penalty
from .multipliers import Multipliers
from .objectives import EARLY_EXIT_SCALES, AugmentedLagrangian, EarlyExit, Lagrangian, LayerObjective
from .primal_dual import ConstraintStateError, PrimalDual
from .stats import LayerLosses, LayerStats, LayerTotals, StepStats, descent_counts, stats_metrics, step_stats

__all__ = [
    "DUAL_OPTIMIZERS",
    "EARLY_EXIT_SCALES",
    "AdamDual",
    "AugmentedLagrangian",
    "AugmentedLagrangianDual",
    "ConstraintStateError",
    "DescentConstraints",
    "DualOptimizer",
    "EarlyExit",
    "FixedDual",
    "Lagrangian",
    "LayerLosses",
    "LayerObjective",
    "LayerStats",
    "LayerTotals",
    "Multipliers",
    "NuPIDual",
    "PrimalDual",
    "SGDDual",
    "StepStats",
    "constraint_values",
    "descent_counts",
    "dual_optimizer_class",
    "penalty",
    "stats_metrics",
    "step_stats",
]

REMOVED = {
    "slack": "constraint_values(spec, layer_sums, num_tokens) (host floats, the library's one form of the formula)",
    "constraint_sums": "constraint_values(spec, layer_sums, num_tokens) times num_tokens",
}


def __getattr__(name: str):
    if name in REMOVED:  # an ImportError, so `from constrained_sft.constraints import slack` shows this line
        raise ImportError(f"constrained_sft.constraints.{name} was removed: use {REMOVED[name]}.")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
