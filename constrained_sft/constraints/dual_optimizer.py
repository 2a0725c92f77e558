"""Projected dual ascent on the multipliers, with resilience (dual weight decay), and its pickle-free state."""

from __future__ import annotations

from typing import Any

import torch

from .multipliers import Multipliers


class DualOptimizer:
    """
    One ascent step per call: `lambda <- proj[lambda + lr * (slack - resilience * lambda)]` for `'sgd'`, the same
    ascent direction through Adam for `'adam'`. `slack` is the constraint value `g_c` (positive = violated).

    Resilience (paper, Appendix A.5) is the gradient of `-resilience/2 * ||lambda||^2` added to the dual function:
    it relaxes each constraint by `resilience * lambda`, so a multiplier settles at about `slack / resilience`.
    """

    def __init__(self, multipliers: Multipliers, kind: str = "sgd", lr: float = 0.01, resilience: float = 0.0) -> None:
        if kind == "sgd":
            self.optimizer: torch.optim.Optimizer = torch.optim.SGD([multipliers.weight], lr=lr, maximize=True)
        elif kind == "adam":
            self.optimizer = torch.optim.Adam([multipliers.weight], lr=lr, maximize=True)
        else:
            raise ValueError(f"`dual_optimizer` must be one of ['sgd', 'adam'], got {kind!r}.")
        self.multipliers = multipliers
        self.kind = kind
        self.resilience = resilience

    @torch.no_grad()
    def step(self, slack: torch.Tensor) -> bool:
        """Ascend on `slack` (shape `[num_constraints]`); returns False, changing nothing, if it is not finite."""
        if slack.shape != self.multipliers.weight.shape:
            raise ValueError(f"Expected {len(self.multipliers)} slack values, got shape {tuple(slack.shape)}.")
        if not bool(torch.isfinite(slack).all()):
            return False
        weight = self.multipliers.weight
        weight.grad = slack.to(weight) - self.resilience * weight
        self.optimizer.step()
        weight.grad = None
        self.multipliers.project_()
        return True

    # Checkpoints hold tensors in safetensors and the rest in JSON, never pickle.
    def state_tensors(self) -> dict[str, torch.Tensor]:
        tensors = {"multipliers": self.multipliers.weight.detach().cpu().clone()}
        for name, value in self.optimizer.state_dict()["state"].get(0, {}).items():
            if torch.is_tensor(value):
                tensors[f"optimizer.{name}"] = value.detach().cpu().clone().reshape(value.shape)
        return tensors

    def state_json(self) -> dict[str, Any]:
        state = self.optimizer.state_dict()
        scalars = {k: v for k, v in state["state"].get(0, {}).items() if not torch.is_tensor(v)}
        groups = [{k: v for k, v in g.items() if k != "params"} for g in state["param_groups"]]
        return {"kind": self.kind, "resilience": self.resilience, "param_groups": groups, "scalars": scalars}

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
        with torch.no_grad():
            self.multipliers.weight.copy_(saved)
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
