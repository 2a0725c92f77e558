"""
What the measured layers add to a micro-batch's training loss, as classes beside the descent problem: the objectives
a user compares constrained training with. Each is a linear form in the measured layers' loss sums `[n]` and the
token count, given as `n + 1` coefficients (the form `lagrangian.penalty_coefficients` defines), so every objective
goes through the same token-sampled readout, penalty, logging, feasibility report and resume:

- `Lagrangian`: sum_c lambda_c g_c over the descent constraints. With a dual optimizer that ascends, primal-dual
  training (`constraints: descent`); with `FixedDual`, the penalty method (`constraints: penalty`: the same terms with
  a constant weight, no dual ascent: the control that isolates what the dual ascent adds).
- `EarlyExit`: sum_l w_l f_l over the measured layers below L with fixed weights, the deep-supervision loss of
  LayerSkip and torchtune's `early_exit_loss` (`constraints: early_exit`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar

import torch

from .lagrangian import DescentConstraints, penalty_coefficients

# torchtune's scale rules: s(l) for each 1-based exit layer of `exits` (increasing, the last one L)
EARLY_EXIT_SCALES: dict[str, Callable[[Sequence[int]], list[float]]] = {
    "uniform": lambda exits: [1.0] * len(exits),
    "linear": lambda exits: [float(x) for x in exits],
    "sum": lambda exits: [float(sum(exits[: i + 1])) for i in range(len(exits))],  # the running sum of the exits
    "sqrt": lambda exits: [math.sqrt(x) for x in exits],
    "inv": lambda exits: [1.0 / x for x in exits],
    "inv_sqrt": lambda exits: [1.0 / math.sqrt(x) for x in exits],
}


class LayerObjective(ABC):
    """The measured layers' term of the training loss, as the `n + 1` coefficients of a linear form (see
    `lagrangian.penalty_coefficients`). `uses_multipliers`: whether the multipliers weigh it (and are logged)."""

    name: ClassVar[str]
    uses_multipliers: ClassVar[bool]

    @abstractmethod
    def coefficients(self, spec: DescentConstraints, multipliers: torch.Tensor) -> list[float]:
        """`[n + 1]` float64 coefficients: `n` for the measured layers' loss sums, the last for the token count."""


class Lagrangian(LayerObjective):
    """sum_c lambda_c g_c over the descent constraints (primal-dual training, or the penalty method)."""

    name = "lagrangian"
    uses_multipliers = True

    def coefficients(self, spec: DescentConstraints, multipliers: torch.Tensor) -> list[float]:
        return penalty_coefficients(spec, multipliers)


class EarlyExit(LayerObjective):
    """
    sum_l w_l f_l over the measured layers, with fixed weights `w` `[n]` (0 for layer L itself, the trainer's own
    objective). [`EarlyExit.from_scale`] builds them by torchtune's rules.
    """

    name = "early_exit"
    uses_multipliers = False

    def __init__(self, weights: Sequence[float]) -> None:
        if not all(math.isfinite(w) and w >= 0 for w in weights):
            raise ValueError(f"Early-exit weights must be finite numbers >= 0, got {list(weights)}.")
        self.weights = tuple(float(w) for w in weights)

    @classmethod
    def from_scale(cls, layers: Sequence[int], num_layers: int, rule: str, weight: float) -> EarlyExit:
        """
        Weights for the measured `layers` of an L = `num_layers` layer model: w_l = `weight` x s(l) / s(L) for each
        layer below L (s: `EARLY_EXIT_SCALES[rule]` over those layers and L), 0 for L. torchtune normalises the
        scales to sum 1 over every exit, L's included; here f_L keeps weight 1, the objective of plain fine-tuning,
        so the exits keep torchtune's ratios to L and the loss keeps the trainer's scale (`weight` 0: plain
        fine-tuning).
        """
        if rule not in EARLY_EXIT_SCALES:
            raise ValueError(f"`early_exit_scale` must be one of {list(EARLY_EXIT_SCALES)}, got {rule!r}.")
        below = [layer for layer in layers if layer < num_layers]
        scales = EARLY_EXIT_SCALES[rule]([*below, num_layers])
        by_layer = {layer: weight * s / scales[-1] for layer, s in zip(below, scales, strict=False)}
        return cls([by_layer.get(layer, 0.0) for layer in layers])

    def coefficients(self, spec: DescentConstraints, multipliers: torch.Tensor) -> list[float]:
        if len(self.weights) != len(spec.layers):
            raise ValueError(
                f"{len(self.weights)} early-exit weights for {len(spec.layers)} measured layers {list(spec.layers)}."
            )
        return [*self.weights, 0.0]
