"""
Projected dual ascent on the multipliers, with resilience (dual weight decay). Each dual optimizer is a class behind
one base (`DualOptimizer`), registered in `DUAL_OPTIMIZERS` (the config's `dual_optimizer` values) by defining it,
with its own settings (`settings`: the config fields it reads) and behaviour flags (`ascends`); its state round-trips
through `state_dict()` / `load_state_dict()` like a torch optimizer's, with no file format in it (a trainer's
checkpoints write it: `trainers/resume/files.py`). Here: the base, plain ascent (SGD, Adam) and no ascent (`FixedDual`,
which the penalty and early-exit modes take); the methods beyond plain ascent, nuPI and the augmented Lagrangian, are
`dual_methods`, registered in the same table.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from ..utils.registry import Registry
from ..utils.types import StateDict
from .multipliers import Multipliers
from .objectives import LayerObjective
from .variants import HasSettings, SettingValues


def _jsonable(value: Any) -> bool:
    """A param-group setting a checkpoint's JSON can hold (numbers, strings, flags, tuples of numbers)."""
    if isinstance(value, (list, tuple)):
        return all(_jsonable(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


class DualOptimizer(HasSettings, ABC):
    """
    One ascent step per call: `lambda <- proj[lambda + lr * (slack - resilience * lambda)]` through the subclass's
    update rule (`ascend`). `slack` is the constraint value `g_c` (positive = violated).

    Resilience (paper, Appendix A.5) is the gradient of `-resilience/2 * ||lambda||^2` added to the dual function:
    it relaxes each constraint by `resilience * lambda`, so a multiplier settles at about `slack / resilience`.

    With `explicit_relaxation` (the form of Hounie et al. 2023 the paper's video experiments use, B.1-B.2) the
    relaxation u_c >= 0 is its own variable with cost u^2 / (2 resilience): the ascent direction is `slack - u`, then
    u moves toward its optimum resilience * lambda, `u <- u + min(1, lr) (resilience * lambda - u)` (a gradient step
    on its cost preconditioned by `resilience`, stable for any resilience). It settles where the weight-decay form
    does (u = resilience * lambda), but it can be restarted: `reset_relaxation()` sets u = 0 (the paper's
    "resilience restarts").

    A new dual optimizer is a subclass, one class in one file: its `name` (`@DUAL_OPTIMIZERS.register` makes it a
    `dual_optimizer` choice; unregistered, it can still be passed to `PrimalDual`), the torch optimizer it builds,
    and (optionally) a cheaper `ascend`, its own settings (`HasSettings`: a typed `settings_class` dataclass, or
    `settings`, keyword argument of `__init__` -> the `Setting` of the config field that carries it; a static field for
    this library's variants, `plugin_settings` for one's own), a cross-field check (`settings_problem`), the objective it needs
    (`objective`) and state beyond the torch optimizer's (`extra_state`).
    """

    name: ClassVar[str]
    help: ClassVar[str] = ""  # what `dual_optimizer: <name>` does: the field's help and the reference's table
    ascends: ClassVar[bool] = True  # the multipliers move with the slack (False: fixed weights, measured only)

    @classmethod
    def settings_problem(cls, values: SettingValues) -> str | None:
        """A refusal that needs several settings at once (`values`: keyword argument -> value); None: allowed."""
        return None

    def __init__(
        self, multipliers: Multipliers, lr: float = 0.01, resilience: float = 0.0, explicit_relaxation: bool = False
    ) -> None:
        if explicit_relaxation and not resilience > 0:
            raise ValueError(f"An explicit relaxation needs `resilience` > 0, got {resilience}.")
        self.multipliers = multipliers
        self.optimizer = self.make_optimizer(multipliers.weight, lr)
        self.resilience = resilience
        # [C] u, float64 like the multipliers; None in the weight-decay form
        self.relaxation = torch.zeros_like(multipliers.weight.detach()) if explicit_relaxation else None

    @abstractmethod
    def make_optimizer(self, weight: torch.nn.Parameter, lr: float) -> torch.optim.Optimizer:
        """The torch optimizer that owns `weight` (`[C]`), maximizing."""

    def ascend(self, weight: torch.nn.Parameter, direction: torch.Tensor) -> None:
        """Move `weight` up `direction` (`[C]`, float64) by the optimizer's rule, before the projection."""
        weight.grad = direction
        self.optimizer.step()
        weight.grad = None

    def objective(self) -> LayerObjective | None:
        """The objective this method needs (None: whichever the run chose, normally the `Lagrangian`)."""
        return None

    def extra_state(self) -> dict[str, torch.Tensor]:
        """Tensors beyond the multipliers, relaxation and torch optimizer that a resumed run needs."""
        return {}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:  # noqa: B027 (optional hook, like torch's)
        """Restore `extra_state()`'s tensors (nothing to restore by default)."""

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    @torch.no_grad()
    def step(self, slack: torch.Tensor) -> bool:
        """Ascend on `slack` (shape `[num_constraints]`); returns False, changing nothing, if it is not finite."""
        if slack.shape != self.multipliers.weight.shape:
            raise ValueError(f"Expected {len(self.multipliers)} slack values, got shape {tuple(slack.shape)}.")
        if not all(map(math.isfinite, slack.tolist())):  # a handful of values, read on the host
            return False
        weight = self.multipliers.weight
        # the ascent direction: slack - resilience * lambda (weight-decay form), or slack - u (explicit relaxation)
        if self.relaxation is None:
            direction = torch.add(slack.to(weight), weight, alpha=-self.resilience)
        else:
            direction = slack.to(weight) - self.relaxation
        self.ascend(weight, direction)
        self.multipliers.project_()
        if self.relaxation is not None:
            u = self.relaxation
            u.add_(min(1.0, self.lr) * (self.resilience * weight.detach() - u)).clamp_(min=0.0)
        return True

    def reset_relaxation(self) -> None:
        """u = 0 (explicit relaxation only): every constraint is tight again until the relaxation regrows."""
        if self.relaxation is not None:
            self.relaxation.zero_()

    def relaxation_values(self) -> list[float]:
        """u per constraint: the explicit variable, else resilience * lambda."""
        if self.relaxation is not None:
            return self.relaxation.tolist()
        return [self.resilience * lam for lam in self.multipliers.weight.tolist()]

    def state_dict(self) -> StateDict:
        """Copies of everything a resumed run needs: multipliers, relaxation, the torch optimizer's state, settings."""
        return {
            "kind": self.name,
            "resilience": self.resilience,
            "explicit_relaxation": self.relaxation is not None,
            "multipliers": self.multipliers.weight.detach().clone(),
            "relaxation": None if self.relaxation is None else self.relaxation.clone(),
            "optimizer": self.optimizer_state(),
            "extra": {k: v.clone() for k, v in self.extra_state().items()},
        }

    def optimizer_state(self) -> StateDict:
        """The torch optimizer's state, its param groups reduced to the settings JSON can hold (nuPI's gains are
        tensors: they come from the run's config on resume, like the learning rate)."""
        state = copy.deepcopy(self.optimizer.state_dict())
        state["param_groups"] = [{k: v for k, v in g.items() if _jsonable(v)} for g in state["param_groups"]]
        return state

    def load_state_dict(self, state: StateDict) -> None:
        """Restore `state_dict()`'s output; another dual optimizer, constraint count or relaxation form is refused
        naming the setting. The run's current learning rate wins (a user may lower the dual lr on resume)."""
        if state.get("kind") != self.name:
            raise ValueError(
                f"The checkpoint's dual optimizer is {state.get('kind')!r} but `dual_optimizer={self.name!r}`; resume "
                "with the same `dual_optimizer` or start a new run."
            )
        saved = state["multipliers"]
        if saved.shape != self.multipliers.weight.shape:
            raise ValueError(
                f"The checkpoint holds {saved.numel()} multipliers but this run has {len(self.multipliers)} "
                "constraints; `constrained_layers` / `descent_epsilon` must match the run being resumed."
            )
        if bool(state.get("explicit_relaxation", False)) != (self.relaxation is not None):
            raise ValueError(
                f"The checkpoint was trained with `resilience_restarts={self.relaxation is None}` but this run "
                f"has `resilience_restarts={self.relaxation is not None}`; resume with the same setting."
            )
        lr = self.lr
        with torch.no_grad():
            self.multipliers.weight.copy_(saved)
            if self.relaxation is not None:
                self.relaxation.copy_(state["relaxation"])
        current = self.optimizer.state_dict()["param_groups"]
        saved_groups = state["optimizer"]["param_groups"]
        groups = [{**cg, **g, "params": cg["params"]} for g, cg in zip(saved_groups, current, strict=True)]
        self.optimizer.load_state_dict({"state": state["optimizer"]["state"], "param_groups": groups})
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.load_extra_state(state.get("extra", {}))


# the config's `dual_optimizer` values and their classes, in the order they are registered
DUAL_OPTIMIZERS: Registry[DualOptimizer] = Registry("dual optimizer", DualOptimizer)


@DUAL_OPTIMIZERS.register
class SGDDual(DualOptimizer):
    """Projected gradient ascent: `lambda <- max(0, lambda + lr * direction)`."""

    name = "sgd"
    help = "projected gradient ascent, lambda <- max(0, lambda + dual_lr (slack - resilience lambda))."

    def make_optimizer(self, weight: torch.nn.Parameter, lr: float) -> torch.optim.Optimizer:
        return torch.optim.SGD([weight], lr=lr, maximize=True)

    def ascend(self, weight: torch.nn.Parameter, direction: torch.Tensor) -> None:
        # SGD's own update for this group (no momentum or weight decay, maximize), lambda += lr * direction, bit for
        # bit (a test holds it to torch.optim.SGD) without `Optimizer.step`'s per-call machinery (hooks, profiler
        # scope, grad-mode switch, grouping), whose cost is all overhead for a few numbers
        weight.add_(direction, alpha=self.lr)


@DUAL_OPTIMIZERS.register
class AdamDual(DualOptimizer):
    """Adam on the same ascent direction, then the same projection (the paper's choice)."""

    name = "adam"
    help = "Adam on the same ascent direction, then the same projection (the paper's choice)."

    def make_optimizer(self, weight: torch.nn.Parameter, lr: float) -> torch.optim.Optimizer:
        return torch.optim.Adam([weight], lr=lr, maximize=True)


class FixedDual(DualOptimizer):
    """
    No dual ascent: the multipliers keep the values they start with (`dual_init`), whatever the slack. With the
    `Lagrangian` objective this is the penalty method (`constraints: penalty`); with `EarlyExit` the multipliers are
    not used at all. Not a `dual_optimizer` choice: the `constraints` mode selects it.
    """

    name = "fixed"
    help = "no dual ascent: the multipliers keep their start (the penalty and early-exit modes' choice)."
    ascends = False  # penalty / early exit: the constraints are measured, not enforced

    def make_optimizer(self, weight: torch.nn.Parameter, lr: float) -> torch.optim.Optimizer:
        return torch.optim.SGD([weight], lr=0.0, maximize=True)  # owns the weight, never moves it

    def ascend(self, weight: torch.nn.Parameter, direction: torch.Tensor) -> None:
        pass


def dual_optimizer_class(name: str) -> type[DualOptimizer]:
    """The class named `name` in `DUAL_OPTIMIZERS`; another name is refused listing them."""
    if name not in DUAL_OPTIMIZERS:
        raise ValueError(f"`dual_optimizer` must be one of {list(DUAL_OPTIMIZERS)}, got {name!r}.")
    return DUAL_OPTIMIZERS[name]
