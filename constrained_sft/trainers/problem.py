"""
The run's constrained problem (`PrimalDual`): built from the config's constraint fields through the registries of
`constraints` (`constraints.modes`: the mode picks the objective and whether the multipliers move; its dual optimizer
the ascent rule), or a user's own passed as `primal_dual=`, checked against the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..constraints import DescentConstraints, PrimalDual, mode_of
from ..constraints.modes import ModeSettings

if TYPE_CHECKING:
    from ..config import ConstraintArguments


def primal_dual_from_config(args: ConstraintArguments, num_layers: int) -> PrimalDual:
    """The `PrimalDual` the config's constraint fields describe, for a model of `num_layers` layers."""
    spec = DescentConstraints.resolve(num_layers, args.layer_setting, args.alpha_setting, args.descent_epsilon)
    settings: ModeSettings = {
        "enabled": True,
        **mode_of(args.constraints).primal_dual_settings(args, spec, num_layers),
    }
    return PrimalDual(
        spec,
        dual_lr=args.dual_lr,
        resilience=args.resilience,
        dual_max=args.dual_max,
        warmup_steps=args.constraint_warmup_steps,
        window=args.feasibility_window,
        explicit_relaxation=args.resilience_restarts,
        **settings,
    )


def own_primal_dual(primal_dual, num_layers: int) -> PrimalDual:
    """A user's `primal_dual=`, used as given (its constraints, multipliers and dual optimizer replace what the
    config's constraint fields would build); refused, naming the argument, if it is not one or measures layers the
    model does not have."""
    if not isinstance(primal_dual, PrimalDual):
        raise TypeError(f"`primal_dual` must be a constrained_sft.PrimalDual, got {type(primal_dual).__name__}.")
    layers = primal_dual.spec.layers
    if not layers or min(layers) < 1 or max(layers) > num_layers:
        raise ValueError(
            f"`primal_dual` measures layers {list(layers)}, but the model has layers 1..{num_layers}; build its "
            f"DescentConstraints with DescentConstraints.resolve({num_layers}, ...)."
        )
    return primal_dual
