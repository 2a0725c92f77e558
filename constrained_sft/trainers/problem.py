"""
The run's constrained problem (`PrimalDual`): built from the config's constraint fields, where the config's names
become classes (the only place they do: `constraints` picks the objective and whether the multipliers move,
`dual_optimizer` the ascent rule), or a user's own passed as `primal_dual=`, checked against the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..constraints import DescentConstraints, EarlyExit, FixedDual, PrimalDual, dual_optimizer_class


def _descent(args, spec: DescentConstraints, num_layers: int) -> dict[str, Any]:
    """Primal-dual training: the descent terms weighted by multipliers that ascend on their slack (the dual
    optimizer's own settings from the config fields it names)."""
    method = dual_optimizer_class(args.dual_optimizer)
    settings = {key: getattr(args, name) for key, name in method.config_fields.items()}
    return {"dual_optimizer": method, "dual_init": args.dual_init, "dual_settings": settings}


def _penalty(args, spec: DescentConstraints, num_layers: int) -> dict[str, Any]:
    """The penalty method: the same terms with every multiplier fixed at `penalty_weight` (no dual ascent)."""
    return {"dual_optimizer": FixedDual, "dual_init": args.penalty_weight}


def _early_exit(args, spec: DescentConstraints, num_layers: int) -> dict[str, Any]:
    """Fixed per-layer weights on the measured layers below L; the multipliers stay 0 and unused."""
    objective = EarlyExit.from_scale(spec.layers, num_layers, args.early_exit_scale, args.early_exit_weight)
    return {"dual_optimizer": FixedDual, "dual_init": 0.0, "objective": objective}


def _none(args, spec: DescentConstraints, num_layers: int) -> dict[str, Any]:
    """ERM: nothing added to the loss; the layers measured, the (unused) dual state kept as `descent` would."""
    return {**_descent(args, spec, num_layers), "enabled": False}


# the config's `constraints` values -> the PrimalDual settings of that mode
MODES: dict[str, Callable[[Any, DescentConstraints, int], dict[str, Any]]] = {
    "descent": _descent,
    "penalty": _penalty,
    "early_exit": _early_exit,
    "none": _none,
}


def primal_dual_from_config(args, num_layers: int) -> PrimalDual:
    """The `PrimalDual` the config's constraint fields describe, for a model of `num_layers` layers."""
    spec = DescentConstraints.resolve(num_layers, args.constrained_layers, args.descent_alpha, args.descent_epsilon)
    if args.constraints not in MODES:
        raise ValueError(f"`constraints` must be one of {list(MODES)}, got {args.constraints!r}.")
    settings = {"enabled": True, **MODES[args.constraints](args, spec, num_layers)}
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
