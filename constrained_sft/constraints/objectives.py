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
- `AugmentedLagrangian`: the Lagrangian plus the quadratic term of the augmented Lagrangian method, whose weights
  depend on the micro-batch's own constraint values (`dual_optimizer: augmented_lagrangian`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, Literal, TypeAlias

import torch

from .lagrangian import (
    DescentConstraints,
    coefficient_tensors,
    constraint_matrix,
    linear_penalty,
    penalty_coefficients,
)
from .stats import LayerLosses

# A fixed table, read-only (`MappingProxyType`): its entries are functions, not classes a plug-in registers, so
# `utils.registry.Registry`, which checks classes, is not theirs; another one is another row here.
# the names of its rules, for the config field that picks one (`tests/test_config_types.py` holds the two equal)
EarlyExitScale: TypeAlias = Literal["uniform", "linear", "sum", "sqrt", "inv", "inv_sqrt"]
# torchtune's scale rules: s(l) for each 1-based exit layer of `exits` (increasing, the last one L)
EARLY_EXIT_SCALES: Mapping[str, Callable[[Sequence[int]], list[float]]] = MappingProxyType(
    {
        "uniform": lambda exits: [1.0] * len(exits),
        "linear": lambda exits: [float(x) for x in exits],
        "sum": lambda exits: [float(sum(exits[: i + 1])) for i in range(len(exits))],  # the running sum of the exits
        "sqrt": lambda exits: [math.sqrt(x) for x in exits],
        "inv": lambda exits: [1.0 / x for x in exits],
        "inv_sqrt": lambda exits: [1.0 / math.sqrt(x) for x in exits],
    }
)


class LayerObjective(ABC):
    """The measured layers' term of the training loss, as the `n + 1` coefficients of a linear form (see
    `lagrangian.penalty_coefficients`). `uses_multipliers`: whether the multipliers weigh it (and are logged)."""

    name: ClassVar[str]
    uses_multipliers: ClassVar[bool]
    # (multipliers, layer coefficients on the device, token coefficient): see `penalty`
    _cached: tuple[torch.Tensor, torch.Tensor, float] | None = None

    @abstractmethod
    def coefficients(self, spec: DescentConstraints, multipliers: torch.Tensor) -> list[float]:
        """`[n + 1]` float64 coefficients: `n` for the measured layers' loss sums, the last for the token count."""

    def penalty(self, spec: DescentConstraints, dual: Any, losses: LayerLosses) -> torch.Tensor:
        """
        Token-sum of the term for one micro-batch, differentiable in the layer losses, with the multipliers of `dual`
        (the run's `DualOptimizer`, which imports this module: untyped here): its coefficients `[n + 1]`
        reach the device once per multiplier update, not once per micro-batch (a blocking host -> device copy is a
        device sync).
        """
        device = losses.sums.device
        lam = dual.multipliers.weight.detach()  # [C] on the host: comparing it costs no device sync
        cached = self._cached
        if cached is None or cached[1].device != device or not torch.equal(cached[0], lam):
            cached = self._cached = (lam.clone(), *coefficient_tensors(self.coefficients(spec, lam), device))
        return linear_penalty(cached[1], cached[2], losses.sums, losses.num_tokens)


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


class AugmentedLagrangian(Lagrangian):
    """
    The augmented Lagrangian's primal term for inequality constraints (cooper's `AugmentedLagrangian` formulation,
    Nocedal & Wright eq. 17.65): sum_c (relu(lambda_c + c_c g_c)^2 - lambda_c^2) / (2 c_c), c the penalty
    coefficients of the dual optimizer (`AugmentedLagrangianDual`), g the micro-batch's own constraint values
    (relaxed by resilience, see the dual optimizer). Its gradient is sum_c w_c grad g_c with w_c = relu(lambda_c +
    c_c g_c): what is computed is the linear form sum_c w_c (N g_c), w detached, which has that gradient and keeps the
    token-sum scale of the other objectives (logged as the penalty; it is not the quadratic term's value).

    Unlike the linear objectives, the weights read each micro-batch's constraint values: with gradient accumulation
    or several ranks each micro-batch is weighed by its own, so batch 8 x accumulation 1 and batch 1 x accumulation 8
    agree only in expectation. Per micro-batch: a [C, n] x [n] product and a handful of [C] ops on the device, no
    host sync.
    """

    name = "augmented_lagrangian"
    # (multipliers, penalty coefficients, relaxation, the terms' [C, n] and [C] tensors, lambda, c, u on the device)
    _forms: tuple[torch.Tensor, ...] | None = None

    def penalty(self, spec: DescentConstraints, dual: Any, losses: LayerLosses) -> torch.Tensor:
        device = losses.sums.device
        lam = dual.multipliers.weight.detach()
        penalty = dual.penalty  # [C] the AugmentedLagrangianDual's coefficients
        relaxation = torch.tensor(dual.relaxation_values(), dtype=torch.float64)
        forms = self._forms
        if (
            forms is None
            or forms[3].device != device
            or not all(torch.equal(a, b) for a, b in zip(forms[:3], (lam, penalty, relaxation), strict=True))
        ):
            matrix, offsets = constraint_matrix(spec)
            on_device = [t.to(device, torch.float32) for t in (matrix, offsets, lam, penalty, relaxation)]
            forms = self._forms = (lam.clone(), penalty.clone(), relaxation, *on_device)
        matrix, offsets, lam_d, penalty_d, relaxation_d = forms[3:]
        tokens = losses.num_tokens.float()
        sums = matrix @ losses.sums.float() + offsets * tokens  # [C] N g_c, differentiable
        g = sums.detach() / tokens.clamp(min=1)  # [C] the micro-batch's constraint values (0 without a token)
        weights = torch.relu(lam_d + penalty_d * (g - relaxation_d))  # [C] relu(lambda + c (g - u))
        return (weights * sums).sum()
