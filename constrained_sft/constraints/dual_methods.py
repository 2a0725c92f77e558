"""
The dual methods beyond plain ascent, each a `DualOptimizer` registered in `DUAL_OPTIMIZERS` by defining it: nuPI, a
PI controller on the multipliers (cooper's `nuPI` optimizer), and the augmented Lagrangian method (with its objective
in `objectives`). Their settings are config fields through `settings` (`variants.Setting`), like every variant's.
"""

from __future__ import annotations

import math

import torch
from cooper.optim.torch_optimizers.nupi_optimizer import nuPI  # where cooper defines it (not re-exported)

from .dual_optimizer import DUAL_OPTIMIZERS, DualOptimizer, SGDDual
from .multipliers import Multipliers
from .objectives import AugmentedLagrangian, LayerObjective
from .variants import Setting, SettingValues, finite_at_least, is_number


@DUAL_OPTIMIZERS.register
class NuPIDual(DualOptimizer):
    """
    nuPI (Sohrabi et al., ICML 2024): a proportional-integral controller on the multipliers, through cooper's `nuPI`
    optimizer (the reference implementation, with its "SGD" initialisation: the first step is plain ascent). With
    e_t the ascent direction (slack - resilience * lambda) and xi_t = ema xi_{t-1} + (1 - ema) e_t:
    `lambda <- proj[lambda + lr (ki e_t + kp (xi_t - xi_{t-1}))]`. The integral term is SGD's ascent; the proportional
    term reacts to the change of the slack, damping the overshoot and oscillation of plain ascent. kp = 0, ki = 1 is
    SGD bit for bit; kp = ki = 1, ema = 0 is the optimistic gradient method. Resilience acts through e_t, as for SGD.
    """

    name = "nupi"
    help = "a PI controller on the same direction (cooper's nuPI; gains `nupi_kp`, `nupi_ki`, `nupi_ema`)."
    settings = {
        "kp": Setting(
            "nupi_kp",
            help="`dual_optimizer: nupi`: proportional gain K_P >= 0, the weight of the change of the slack in each step, "
            "lambda <- proj[lambda + dual_lr (K_I e_t + K_P (xi_t - xi_{t-1}))] (0: SGD; 1 with `nupi_ema` 0: the "
            "optimistic gradient method). Damps the overshoot of plain ascent.",
            valid=finite_at_least(0.0),
            requirement="must be a finite number >= 0",
        ),
        "ki": Setting(
            "nupi_ki",
            help="`dual_optimizer: nupi`: integral gain K_I >= 0 (1: SGD's ascent; K_P + K_I > 0).",
            valid=finite_at_least(0.0),
            requirement="must be a finite number >= 0",
        ),
        "ema": Setting(
            "nupi_ema",
            help="`dual_optimizer: nupi`: nu in [0, 1), the moving average xi_t = nu xi_{t-1} + (1 - nu) e_t of the ascent "
            "direction that the proportional term differentiates (0: the raw slack).",
            valid=lambda v: is_number(v) and 0 <= v < 1,
            requirement="must lie in [0, 1)",
        ),
    }

    @classmethod
    def settings_problem(cls, values: SettingValues) -> str | None:
        kp, ki = values["kp"], values["ki"]  # each checked a finite number >= 0 by now
        if is_number(kp) and is_number(ki) and not kp + ki > 0:
            return "`nupi_kp` and `nupi_ki` are both 0: nuPI would never move the multipliers; set one > 0."
        return None

    def __init__(
        self,
        multipliers: Multipliers,
        lr: float = 0.01,
        resilience: float = 0.0,
        explicit_relaxation: bool = False,
        kp: float = 1.0,
        ki: float = 1.0,
        ema: float = 0.0,
    ) -> None:
        if not (kp >= 0 and ki >= 0 and kp + ki > 0 and 0 <= ema < 1):
            raise ValueError(f"nuPI needs kp >= 0, ki >= 0, kp + ki > 0 and 0 <= ema < 1, got {kp=}, {ki=}, {ema=}.")
        self.kp, self.ki, self.ema = float(kp), float(ki), float(ema)
        super().__init__(multipliers, lr, resilience, explicit_relaxation)

    def make_optimizer(self, weight: torch.Tensor, lr: float) -> nuPI:
        # cooper's gains are tensors (it converts a float itself): given as such, the types say what runs
        return nuPI(
            [weight], lr=lr, Kp=torch.tensor(self.kp), Ki=torch.tensor(self.ki), ema_nu=self.ema, maximize=True
        )


@DUAL_OPTIMIZERS.register
class AugmentedLagrangianDual(SGDDual):
    """
    The augmented Lagrangian method (cooper's `AugmentedLagrangian` formulation; Nocedal & Wright, 17.4): the primal
    loss adds, per constraint, (relu(lambda + c g)^2 - lambda^2) / (2c), whose gradient weighs g by
    relu(lambda + c g) instead of lambda (objective `AugmentedLagrangian`); the multipliers take SGD's projected
    ascent step. The penalty coefficient c starts at `penalty` (default: the dual learning rate, the classical method
    of multipliers, lambda's step equal to c) and, with `growth` > 1, is multiplied by `growth` at every dual step
    whose constraint is violated by more than `tolerance` and reset to its start once the constraint holds (cooper's
    multiplicative updater with restarts). Resilience relaxes g by resilience * lambda in both the quadratic term and
    the ascent, the relaxed problem's augmented Lagrangian.
    """

    name = "augmented_lagrangian"
    help = (
        "SGD's ascent plus the quadratic term of the augmented Lagrangian in the loss (`alm_penalty`, `alm_growth`, "
        "`alm_tolerance`)."
    )
    settings = {
        "penalty": Setting(
            "alm_penalty",
            help="`dual_optimizer: augmented_lagrangian`: the initial penalty coefficient c > 0 of the quadratic term "
            "(relu(lambda + c g)^2 - lambda^2) / 2c (default: `dual_lr`, the method of multipliers).",
            valid=lambda v: v is None or finite_at_least(0.0, strict=True)(v),
            requirement="must be None (`dual_lr`) or a finite number > 0",
        ),
        "growth": Setting(
            "alm_growth",
            help="`dual_optimizer: augmented_lagrangian`: factor >= 1 applied to a constraint's c at each dual step it is "
            "violated by more than `alm_tolerance`, c reset once it holds (1: c stays constant).",
            valid=finite_at_least(1.0),
            requirement="must be a finite number >= 1",
        ),
        "tolerance": Setting(
            "alm_tolerance",
            help="`dual_optimizer: augmented_lagrangian`: the violation (nats, >= 0) above which c grows.",
            valid=finite_at_least(0.0),
            requirement="must be a finite number >= 0",
        ),
    }

    def __init__(
        self,
        multipliers: Multipliers,
        lr: float = 0.01,
        resilience: float = 0.0,
        explicit_relaxation: bool = False,
        penalty: float | None = None,
        growth: float = 1.0,
        tolerance: float = 0.0,
    ) -> None:
        start = lr if penalty is None else penalty
        if not (start > 0 and math.isfinite(start) and growth >= 1 and tolerance >= 0):
            raise ValueError(
                f"The augmented Lagrangian needs a penalty coefficient > 0 (`alm_penalty`, or `dual_lr` when it is "
                f"unset), growth >= 1 and tolerance >= 0, got penalty={start}, {growth=}, {tolerance=}."
            )
        super().__init__(multipliers, lr, resilience, explicit_relaxation)
        self.initial_penalty, self.growth, self.tolerance = float(start), float(growth), float(tolerance)
        self.penalty = torch.full_like(multipliers.weight.detach(), self.initial_penalty)  # [C] c per constraint

    def objective(self) -> LayerObjective:
        return AugmentedLagrangian()

    @torch.no_grad()
    def step(self, slack: torch.Tensor) -> bool:
        if not super().step(slack):
            return False
        if self.growth > 1:
            violation = slack.to(self.penalty) - torch.tensor(self.relaxation_values(), dtype=torch.float64)
            grown = torch.where(violation > self.tolerance, self.penalty * self.growth, self.penalty)
            self.penalty = torch.where(violation <= 0, torch.full_like(grown, self.initial_penalty), grown)
        return True

    def extra_state(self) -> dict[str, torch.Tensor]:
        return {"penalty": self.penalty}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        if "penalty" not in state:
            raise ValueError("The checkpoint's augmented Lagrangian state has no penalty coefficients.")
        self.penalty = state["penalty"].to(self.penalty).clone()
