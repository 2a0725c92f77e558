"""Lagrange multipliers for inequality constraints: one lambda >= 0 per constraint, projected in place."""

from __future__ import annotations

import torch


class Multipliers(torch.nn.Module):
    """
    A vector of `num_constraints` multipliers for constraints `g_c <= 0`, kept in `[0, upper]`.

    The tensor is a parameter so that a `torch.optim` optimizer can own it; it never enters the model's
    autograd graph: the Lagrangian reads `value()` (a detached clone), so updating the multipliers in place
    after the primal backward cannot corrupt a saved graph.
    """

    def __init__(self, num_constraints: int, init: float = 0.0, upper: float | None = None) -> None:
        super().__init__()
        if init < 0 or (upper is not None and init > upper):
            raise ValueError(f"Multipliers must start in [0, {upper if upper is not None else 'inf'}], got {init}.")
        self.upper = upper
        # float64: the dual step adds small increments (lr * slack) to values that can grow large
        self.weight = torch.nn.Parameter(torch.full((num_constraints,), float(init), dtype=torch.float64))

    def __len__(self) -> int:
        return self.weight.numel()

    def value(self) -> torch.Tensor:
        """A detached copy, safe to use in the loss while the multipliers are updated later."""
        return self.weight.detach().clone()

    @torch.no_grad()
    def project_(self) -> None:
        """Projection onto the feasible set of the dual: `0 <= lambda <= upper`."""
        self.weight.clamp_(min=0.0, max=self.upper)
