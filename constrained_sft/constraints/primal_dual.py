"""
Primal-dual state of one training run, independent of any Trainer: the constraints, their multipliers and dual
optimizer, the statistics accumulated over the micro-batches of one optimizer step, and a short history of the
optimizer steps with the constraints active (every step of an unconstrained run) for the end-of-training feasibility
report. What it does with them: the penalty of a micro-batch, the dual step once per optimizer step, and its state
through `state_dict()` / `load_state_dict()` (a trainer's checkpoints write that state to files:
`trainers/resume/files.py`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import deque

import torch

from ..utils.types import JSONObject, StateDict
from .dual_optimizer import DualOptimizer, SGDDual
from .feasibility import FeasibilityReport, WindowStep, feasibility_report
from .lagrangian import DescentConstraints
from .multipliers import Multipliers
from .objectives import Lagrangian, LayerObjective
from .stats import LayerLosses, LayerStats, LayerTotals, Reduce, StepStats, step_stats
from .variants import SettingValues

logger = logging.getLogger(__name__)


class ConstraintStateError(ValueError):
    """A saved constraint state that cannot be resumed from: the message names the file and what is wrong."""


class PrimalDual:
    """
    The run's constrained problem and its dual state. `dual_optimizer` is a [`DualOptimizer`] class (`SGDDual`,
    `AdamDual`, `NuPIDual`, `AugmentedLagrangianDual` (with its objective), `FixedDual` for fixed multipliers, or a subclass of one's own); `objective` is what the measured layers
    add to the loss (`Lagrangian`: the descent terms weighted by the multipliers; `EarlyExit`: fixed per-layer
    weights; see `objectives`); `dual_settings` are the dual optimizer's own keyword arguments. The descent constraints are measured and reported whatever the objective. A trainer
    takes a `PrimalDual` built here through `primal_dual=`.
    """

    def __init__(
        self,
        spec: DescentConstraints,
        enabled: bool = True,
        dual_optimizer: type[DualOptimizer] = SGDDual,
        dual_lr: float = 0.01,
        dual_init: float = 0.0,
        resilience: float = 0.0,
        dual_max: float | None = None,
        warmup_steps: int = 0,
        window: int = 20,
        explicit_relaxation: bool = False,
        objective: LayerObjective | None = None,
        dual_settings: SettingValues | None = None,
    ) -> None:
        self.spec = spec
        self.enabled = enabled
        self.warmup_steps = warmup_steps
        self.multipliers = Multipliers(len(spec), init=dual_init, upper=dual_max)
        self.dual = dual_optimizer(self.multipliers, dual_lr, resilience, explicit_relaxation, **(dual_settings or {}))
        needed = self.dual.objective()
        if objective is not None and needed is not None and type(objective) is not type(needed):
            raise ValueError(
                f"The dual optimizer {self.dual.name!r} needs the objective {type(needed).__name__}, got "
                f"{type(objective).__name__}."
            )
        self.objective = objective or needed or Lagrangian()
        self.train_stats = LayerStats(len(spec.layers))
        self.history: deque[WindowStep] = deque(maxlen=window)
        self.skipped_steps = 0
        self.nonfinite_steps = 0  # optimizer steps skipped because the objective or gradient was not finite
        self.last_step_finite = True
        self.last_grad_norm: float | None = None

    def active(self, global_step: int) -> bool:
        """Whether the penalty is in the loss and the multipliers move at this optimizer step."""
        return self.enabled and global_step >= self.warmup_steps

    def penalty(self, losses: LayerLosses) -> torch.Tensor:
        """Token-sum of the objective's term for one micro-batch (sum_c lambda_c g_c with the `Lagrangian`),
        differentiable in the layer losses (see `LayerObjective.penalty`)."""
        return self.objective.penalty(self.spec, self.dual, losses)

    def step(
        self, global_step: int, reduce: Reduce, grad_norm: torch.Tensor | float | None = None
    ) -> StepStats | None:
        """
        End of an optimizer step's micro-batches: reduce their totals over ranks, ascend on the global-batch slack
        when active, and return the step's statistics (None without a supervised token in the global batch). Every
        rank computes the same update from the same reduced totals. `grad_norm` (the step's global gradient norm, a
        device scalar) comes to the host in the same transfer as the totals, so checking it costs no extra device
        sync: when it or a measured layer loss is not finite, the step is recorded as non-finite (`last_step_finite`
        False), the multipliers and the history are left as they were, and the caller decides whether training stops
        or skips the step.
        """
        totals = self.train_stats.pop(reduce)
        if isinstance(grad_norm, torch.Tensor):  # [n + 3] totals and the norm: one device -> host copy
            # FSDP2 clips sharded gradients: the norm is a replicated DTensor
            norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
            *values, grad_norm = torch.cat([totals, norm.detach().reshape(1).to(totals)]).tolist()
        else:
            values = totals.tolist()
        self.last_grad_norm = None if grad_norm is None else float(grad_norm)
        stats = step_stats(self.spec, LayerTotals.unpack(values))
        losses = stats.layer_loss if stats is not None else ()
        norms = (grad_norm,) if grad_norm is not None else ()
        self.last_step_finite = all(math.isfinite(v) for v in (*losses, *norms))
        if stats is None or not self.last_step_finite:
            return stats  # nothing measured (lambda unchanged), or the caller's non-finite policy applies
        updated = False
        if self.active(global_step):
            updated = self.dual.step(torch.tensor(stats.slack, dtype=torch.float64))
            if not updated:
                self.skipped_steps += 1
                logger.warning(
                    "Skipped the dual step at optimizer step %d: the slack is not finite (%s); multipliers kept.",
                    global_step,
                    list(stats.slack),
                )
        if self.enabled and not self.active(global_step):
            return stats  # warm-up: logged, but not part of the feasibility window
        self.history.append(
            WindowStep(
                step=global_step + 1,
                layer_loss=list(stats.layer_loss),
                slack=list(stats.slack),
                dual=self.multipliers.weight.tolist(),
                relaxation=self.dual.relaxation_values(),
                descent_fraction=stats.descent_fraction,
                dual_updated=updated,
            )
        )
        return stats

    def dual_metrics(self) -> dict[str, float]:
        """`dual/<layer>` per constraint; none when the objective does not use the multipliers."""
        if not self.objective.uses_multipliers:
            return {}
        return {f"dual/{k}": v for k, v in zip(self.spec.keys, self.multipliers.value().tolist(), strict=True)}

    def summary(self) -> FeasibilityReport:
        """Feasibility over the recorded window (see [`feasibility_report`]) and the skipped non-finite steps."""
        report = feasibility_report(
            self.spec,
            list(self.history),
            self.multipliers.value().tolist(),
            self.enabled,
            self.skipped_steps,
            self.dual.resilience,
        )
        return dataclasses.replace(
            report,
            objective=self.objective.name,
            dual_optimizer=self.dual.name,
            enforced=self.dual.ascends,  # False: fixed weights (penalty, early exit), the constraints measured only
            nonfinite_steps_skipped=self.nonfinite_steps,
        )

    def state_dict(self) -> StateDict:
        """Everything a resumed run needs (the layout, the dual optimizer's state, the feasibility window, the skip
        counters), as copies; `load_state_dict` restores it."""
        return {
            "spec": {"layers": list(self.spec.layers), "alpha": list(self.spec.alphas), "epsilon": self.spec.epsilon},
            "dual_optimizer": self.dual.state_dict(),
            "history": [row.to_dict() for row in self.history],
            "skipped_steps": self.skipped_steps,
            "nonfinite_steps": self.nonfinite_steps,
        }

    def check_saved_spec(self, saved: JSONObject) -> None:
        """Refuse a saved constraint layout (`state_dict()["spec"]`) other than this run's."""
        if saved["layers"] != list(self.spec.layers) or saved["epsilon"] != self.spec.epsilon:
            raise ValueError(
                f"The checkpoint constrains layers {saved['layers']} (epsilon={saved['epsilon']}) but this run "
                f"constrains {list(self.spec.layers)} (epsilon={self.spec.epsilon}); `constrained_layers` and "
                "`descent_epsilon` must match the run being resumed."
            )

    def load_state_dict(self, state: StateDict) -> None:
        """Restore `state_dict()`'s output; another constraint layout or dual optimizer is refused naming it."""
        self.check_saved_spec(state["spec"])
        self.dual.load_state_dict(state["dual_optimizer"])
        self.history.clear()
        self.history.extend(WindowStep.from_dict(row) for row in state.get("history", []))
        self.skipped_steps = int(state.get("skipped_steps", 0))
        self.nonfinite_steps = int(state.get("nonfinite_steps", 0))
