"""
The settings of the dual methods beyond plain ascent: nuPI's gains and the augmented Lagrangian's penalty
coefficient, validated once; a base of `ConstraintArguments`, so both trainer configs have them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..utils.fields import check_fields


@dataclass
class DualMethodArguments:
    """Fields read only by `dual_optimizer: nupi` (`nupi_*`) or `dual_optimizer: augmented_lagrangian` (`alm_*`)."""

    nupi_kp: float = field(
        default=1.0,
        metadata={
            "help": "`dual_optimizer: nupi`: proportional gain K_P >= 0, the weight of the change of the slack in "
            "each step, lambda <- proj[lambda + dual_lr (K_I e_t + K_P (xi_t - xi_{t-1}))] (0: SGD; 1 with "
            "`nupi_ema` 0: the optimistic gradient method). Damps the overshoot of plain ascent."
        },
    )
    nupi_ki: float = field(
        default=1.0,
        metadata={"help": "`dual_optimizer: nupi`: integral gain K_I >= 0 (1: SGD's ascent; K_P + K_I > 0)."},
    )
    nupi_ema: float = field(
        default=0.0,
        metadata={
            "help": "`dual_optimizer: nupi`: nu in [0, 1), the moving average xi_t = nu xi_{t-1} + (1 - nu) e_t of "
            "the ascent direction that the proportional term differentiates (0: the raw slack)."
        },
    )
    alm_penalty: float | None = field(
        default=None,
        metadata={
            "help": "`dual_optimizer: augmented_lagrangian`: the initial penalty coefficient c > 0 of the quadratic "
            "term (relu(lambda + c g)^2 - lambda^2) / 2c (default: `dual_lr`, the method of multipliers)."
        },
    )
    alm_growth: float = field(
        default=1.0,
        metadata={
            "help": "`dual_optimizer: augmented_lagrangian`: factor >= 1 applied to a constraint's c at each dual "
            "step it is violated by more than `alm_tolerance`, c reset once it holds (1: c stays constant)."
        },
    )
    alm_tolerance: float = field(
        default=0.0,
        metadata={"help": "`dual_optimizer: augmented_lagrangian`: the violation (nats, >= 0) above which c grows."},
    )

    def _validate_dual_method_arguments(self) -> None:
        check_fields(self, DualMethodArguments)
        for name in ("nupi_kp", "nupi_ki", "alm_tolerance"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"`{name}` must be a finite number >= 0, got {value!r}.")
        if not self.nupi_kp + self.nupi_ki > 0:
            raise ValueError("`nupi_kp` and `nupi_ki` are both 0: nuPI would never move the multipliers; set one > 0.")
        if not 0 <= self.nupi_ema < 1:
            raise ValueError(f"`nupi_ema` must lie in [0, 1), got {self.nupi_ema!r}.")
        if self.alm_penalty is not None and not (math.isfinite(self.alm_penalty) and self.alm_penalty > 0):
            raise ValueError(
                f"`alm_penalty` must be None (`dual_lr`) or a finite number > 0, got {self.alm_penalty!r}."
            )
        if not (math.isfinite(self.alm_growth) and self.alm_growth >= 1):
            raise ValueError(f"`alm_growth` must be a finite number >= 1, got {self.alm_growth!r}.")
