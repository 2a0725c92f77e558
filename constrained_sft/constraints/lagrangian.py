"""
The descent constraints and their Lagrangian terms, as pure functions of per-layer loss sums. The formula lives in
one place, `DescentConstraints.terms` (each constraint as a linear form in the layers' loss sums and the token count);
the slack on the host (`constraint_values`) and the penalty's coefficients (`penalty_coefficients`) both read it.

With measured layers l_0 < l_1 < ... < l_{n-1} (1-based), constraint j >= 1 is f_{l_j} <= (1 - alpha_j) f_{l_{j-1}},
and the optional constraint 0 is f_{l_0} <= epsilon. Each constraint is keyed by the layer it bounds, so the logged
`dual/<l>` and `slack/<l>` line up with `layer_loss/<l>`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DescentConstraints:
    layers: tuple[int, ...]  # measured layers, 1-based, increasing; the last is normally L
    alphas: tuple[float, ...]  # one per step: len(layers) - 1
    epsilon: float | None = None

    @classmethod
    def resolve(
        cls, num_layers: int, constrained_layers: str | list[int], alpha: float | list[float], epsilon: float | None
    ) -> DescentConstraints:
        """Check the config fields against a model with `num_layers` layers; errors name the field."""
        if isinstance(constrained_layers, str) and constrained_layers != "all":
            raise ValueError(
                f"`constrained_layers` must be 'all' or a list of layer indices, got {constrained_layers!r}."
            )
        layers = list(range(1, num_layers + 1)) if isinstance(constrained_layers, str) else list(constrained_layers)
        if bad := [layer for layer in layers if not 1 <= layer <= num_layers]:
            raise ValueError(
                f"`constrained_layers` contains {bad}, outside the model's layers 1..{num_layers}; use 'all' or "
                f"indices in 1..{num_layers}."
            )
        steps = len(layers) - 1
        if steps < 1 and epsilon is None:
            raise ValueError(
                f"`constrained_layers`={constrained_layers!r} gives {len(layers)} layer(s) and no descent step; list at "
                "least two layers, or set `descent_epsilon` to bound the one layer."
            )
        if isinstance(alpha, (list, tuple)):
            if len(alpha) != steps:
                pairs = ", ".join(f"{a}->{b}" for a, b in zip(layers, layers[1:], strict=False))
                raise ValueError(
                    f"`descent_alpha` has {len(alpha)} values but the constrained layers {layers} give {steps} descent "
                    f"steps ({pairs}); give one alpha per step or a single float."
                )
            alphas = tuple(float(a) for a in alpha)
        else:
            alphas = (float(alpha),) * steps
        return cls(layers=tuple(layers), alphas=alphas, epsilon=epsilon)

    @property
    def keys(self) -> tuple[int, ...]:
        """The layer each constraint bounds, in constraint order."""
        return self.layers if self.epsilon is not None else self.layers[1:]

    def __len__(self) -> int:
        return len(self.keys)

    @functools.cached_property
    def terms(self) -> tuple[tuple[tuple[tuple[int, float], ...], float], ...]:
        """
        Each constraint's token-sum as a linear form in the measured layers' loss sums S_i and the token count N:
        `g_c x N = sum(a x S_i for (i, a) in pairs_c) + b_c x N`, one `(pairs_c, b_c)` per constraint, in constraint
        order. The host-side formulas (`constraint_values`, `penalty_coefficients`) read it.
        """
        Term = tuple[tuple[tuple[int, float], ...], float]
        first: list[Term] = [(((0, 1.0),), -self.epsilon)] if self.epsilon is not None else []
        steps: list[Term] = [(((j, 1.0), (j - 1, -(1 - a))), 0.0) for j, a in enumerate(self.alphas, start=1)]
        return tuple(first + steps)


def constraint_values(spec: DescentConstraints, layer_sums: Sequence[float], num_tokens: float) -> list[float]:
    """
    `[C]` constraint values g_c = f_{l_j} - (1 - alpha_j) f_{l_{j-1}} (and f_{l_0} - epsilon) at the batch means, from
    the per-layer loss sums `[n]` and the token count, in host float64 (the once-per-optimizer-step statistics: a
    dozen tensor ops on a handful of values cost more than the Python); g_c <= 0 means satisfied; NaN without a token.
    """
    if not num_tokens > 0:
        return [float("nan")] * len(spec)
    return [
        (sum(a * layer_sums[i] for i, a in pairs) + (b * num_tokens if b else 0.0)) / num_tokens
        for pairs, b in spec.terms
    ]


def constraint_matrix(spec: DescentConstraints) -> tuple[torch.Tensor, torch.Tensor]:
    """`spec.terms` as tensors: `A` `[C, n]` and `b` `[C]` float64 with `N g = A @ layer_sums + b N` (for objectives
    that weigh each micro-batch's constraint values on the device)."""
    matrix = torch.zeros(len(spec), len(spec.layers), dtype=torch.float64)
    offsets = torch.zeros(len(spec), dtype=torch.float64)
    for c, (pairs, b) in enumerate(spec.terms):
        for i, a in pairs:
            matrix[c, i] += a
        offsets[c] = b
    return matrix, offsets


def penalty(
    spec: DescentConstraints, multipliers: torch.Tensor, layer_sums: torch.Tensor, num_tokens: torch.Tensor
) -> torch.Tensor:
    """
    Sum_c lambda_c g_c as a token sum (the caller divides by the same token count as the objective), so micro-batches
    and ranks add up to the global-batch Lagrangian, differentiable in `layer_sums` `[n]`; from the coefficients
    (`PrimalDual.penalty` caches them per multiplier update). `multipliers` must be a detached copy.
    """
    return linear_penalty(*penalty_terms(spec, multipliers, layer_sums.device), layer_sums, num_tokens)


def penalty_terms(
    spec: DescentConstraints, multipliers: torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, float]:
    """`linear_penalty`'s coefficients of the Lagrangian (see `coefficient_tensors`)."""
    return coefficient_tensors(penalty_coefficients(spec, multipliers), device)


def coefficient_tensors(coefficients: Sequence[float], device: torch.device) -> tuple[torch.Tensor, float]:
    """`linear_penalty`'s form of `n + 1` coefficients: the layers' `[n]` fp32 on `device` (one host -> device copy)
    and the token count's host float."""
    return torch.tensor(coefficients[:-1], dtype=torch.float32, device=device), coefficients[-1]


def linear_penalty(
    layer_coefficients: torch.Tensor, token_coefficient: float, layer_sums: torch.Tensor, num_tokens: torch.Tensor
) -> torch.Tensor:
    """
    The penalty from its coefficients (see `penalty_coefficients`): `layer_coefficients` `[n]` fp32 on the layer
    sums' device, and the token count's host float (0 without `epsilon`: no op then). Two to four device ops.
    """
    value = (layer_coefficients * layer_sums.float()).sum()
    return value + token_coefficient * num_tokens if token_coefficient else value


def penalty_coefficients(spec: DescentConstraints, multipliers: torch.Tensor) -> list[float]:
    """
    The `n + 1` float64 coefficients of the penalty, which is linear in the per-layer loss sums `[n]` and the token
    count: sum_c lambda_c g_c = coefficients[:n] . layer_sums + coefficients[n] * num_tokens, from `spec.terms`.
    Computed on the host in Python floats (a handful of values: cheaper than a dozen tensor ops) once per multiplier
    update, so a micro-batch's penalty needs no host -> device copy (see `PrimalDual.penalty`).
    """
    coefficients = [0.0] * (len(spec.layers) + 1)
    for lam, (pairs, b) in zip(multipliers.detach().double().tolist(), spec.terms, strict=True):
        for i, a in pairs:
            coefficients[i] += lam * a
        coefficients[-1] += lam * b
    return coefficients
