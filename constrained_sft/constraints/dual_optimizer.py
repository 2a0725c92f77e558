"""Projected dual ascent on the multipliers, with resilience (dual weight decay), and its pickle-free state."""

from __future__ import annotations

import math
from typing import Any

import torch

from .multipliers import Multipliers


class DualOptimizer:
    """
    One ascent step per call: `lambda <- proj[lambda + lr * (slack - resilience * lambda)]` for `'sgd'`, the same
    ascent direction through Adam for `'adam'`. `slack` is the constraint value `g_c` (positive = violated).

    Resilience (paper, Appendix A.5) is the gradient of `-resilience/2 * ||lambda||^2` added to the dual function:
    it relaxes each constraint by `resilience * lambda`, so a multiplier settles at about `slack / resilience`.

    With `explicit_relaxation` (the form of Hounie et al. 2023 the paper's video experiments use, B.1-B.2) the
    relaxation u_c >= 0 is its own variable with cost u^2 / (2 resilience): the ascent direction is `slack - u`, then
    u moves toward its optimum resilience * lambda, `u <- u + min(1, lr) (resilience * lambda - u)` (a gradient step
    on its cost preconditioned by `resilience`, stable for any resilience). It settles where the weight-decay form
    does (u = resilience * lambda), but it can be restarted: `reset_relaxation()` sets u = 0 (the paper's
    "resilience restarts").
    """

    def __init__(
        self,
        multipliers: Multipliers,
        kind: str = "sgd",
        lr: float = 0.01,
        resilience: float = 0.0,
        explicit_relaxation: bool = False,
    ) -> None:
        if kind == "sgd":
            self.optimizer: torch.optim.Optimizer = torch.optim.SGD([multipliers.weight], lr=lr, maximize=True)
        elif kind == "adam":
            self.optimizer = torch.optim.Adam([multipliers.weight], lr=lr, maximize=True)
        else:
            raise ValueError(f"`dual_optimizer` must be one of ['sgd', 'adam'], got {kind!r}.")
        self.multipliers = multipliers
        self.kind = kind
        self.resilience = resilience
        if explicit_relaxation and not resilience > 0:
            raise ValueError(f"An explicit relaxation needs `resilience` > 0, got {resilience}.")
        # [C] u, float64 like the multipliers; None in the weight-decay form
        self.relaxation = torch.zeros_like(multipliers.weight.detach()) if explicit_relaxation else None

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
        if self.kind == "sgd":
            # SGD's own update for this group (no momentum or weight decay, maximize), lambda += lr * direction, bit
            # for bit (a test holds it to torch.optim.SGD) without `Optimizer.step`'s per-call machinery (hooks,
            # profiler scope, grad-mode switch, grouping), whose cost is all overhead for a few numbers
            weight.add_(direction, alpha=self.optimizer.param_groups[0]["lr"])
        else:
            weight.grad = direction
            self.optimizer.step()
            weight.grad = None
        self.multipliers.project_()
        if self.relaxation is not None:
            rate = min(1.0, self.optimizer.param_groups[0]["lr"])
            u = self.relaxation
            u.add_(rate * (self.resilience * weight.detach() - u)).clamp_(min=0.0)
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

    # Checkpoints hold tensors in safetensors and the rest in JSON, never pickle.
    def state_tensors(self) -> dict[str, torch.Tensor]:
        tensors = {"multipliers": self.multipliers.weight.detach().cpu().clone()}
        if self.relaxation is not None:
            tensors["relaxation"] = self.relaxation.cpu().clone()
        for name, value in self.optimizer.state_dict()["state"].get(0, {}).items():
            if torch.is_tensor(value):
                tensors[f"optimizer.{name}"] = value.detach().cpu().clone().reshape(value.shape)
        return tensors

    def state_json(self) -> dict[str, Any]:
        state = self.optimizer.state_dict()
        scalars = {k: v for k, v in state["state"].get(0, {}).items() if not torch.is_tensor(v)}
        groups = [{k: v for k, v in g.items() if k != "params"} for g in state["param_groups"]]
        return {
            "kind": self.kind,
            "resilience": self.resilience,
            "explicit_relaxation": self.relaxation is not None,
            "param_groups": groups,
            "scalars": scalars,
        }

    def load_state(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        if meta.get("kind") != self.kind:
            raise ValueError(
                f"The checkpoint's dual optimizer is {meta.get('kind')!r} but `dual_optimizer={self.kind!r}`; resume "
                "with the same `dual_optimizer` or start a new run."
            )
        saved = tensors["multipliers"]
        if saved.shape != self.multipliers.weight.shape:
            raise ValueError(
                f"The checkpoint holds {saved.numel()} multipliers but this run has {len(self.multipliers)} "
                "constraints; `constrained_layers` / `descent_epsilon` must match the run being resumed."
            )
        if bool(meta.get("explicit_relaxation", False)) != (self.relaxation is not None):
            raise ValueError(
                f"The checkpoint was trained with `resilience_restarts={self.relaxation is None}` but this run "
                f"has `resilience_restarts={self.relaxation is not None}`; resume with the same setting."
            )
        with torch.no_grad():
            self.multipliers.weight.copy_(saved)
            if self.relaxation is not None:
                self.relaxation.copy_(tensors["relaxation"])
        per_param = {k.removeprefix("optimizer."): v for k, v in tensors.items() if k.startswith("optimizer.")}
        per_param.update(meta.get("scalars", {}))
        current = self.optimizer.state_dict()
        groups = [
            {**g, "params": cg["params"]} for g, cg in zip(meta["param_groups"], current["param_groups"], strict=True)
        ]
        self.optimizer.load_state_dict({"state": {0: per_param} if per_param else {}, "param_groups": groups})
        # The run's current settings win over the checkpoint's (a user may lower the dual lr on resume).
        for group in self.optimizer.param_groups:
            group["lr"] = current["param_groups"][0]["lr"]
