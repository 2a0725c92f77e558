"""
Primal-dual state of one training run, independent of any Trainer: the constraints, their multipliers and dual
optimizer, the statistics accumulated over the micro-batches of one optimizer step, and a short history for the
end-of-training feasibility report.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from .dual_optimizer import DualOptimizer
from .lagrangian import DescentConstraints, penalty, slack
from .layer_losses import LayerLosses, descent_counts
from .multipliers import Multipliers

logger = logging.getLogger(__name__)

Reduce = Callable[[torch.Tensor], torch.Tensor]  # sum over data-parallel ranks


class LayerStats:
    """Running totals `[n + 3]` = (layer loss sums, tokens, descending steps, steps), detached, float64."""

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.totals: torch.Tensor | None = None

    def add(self, losses: LayerLosses, reduce: Reduce | None = None) -> None:
        """Add one batch; with `reduce`, its totals are first summed over ranks (a collective call)."""
        descended, steps = descent_counts(losses)
        counts = torch.stack([losses.num_tokens, descended, steps]).to(losses.sums.device)
        row = torch.cat([losses.sums.detach().double(), counts.double()])
        row = reduce(row) if reduce is not None else row
        self.totals = row if self.totals is None else self.totals + row.to(self.totals.device)

    def pop(self, reduce: Reduce) -> torch.Tensor:
        """The totals summed over ranks (every rank must call this), then reset. Zeros when nothing was added."""
        totals = self.totals if self.totals is not None else torch.zeros(self.num_layers + 3, dtype=torch.float64)
        self.totals = None
        return reduce(totals)


def stats_metrics(spec: DescentConstraints, totals: torch.Tensor) -> dict[str, float]:
    """Public metric keys from reduced totals; empty when no supervised token was seen."""
    n = len(spec.layers)
    sums, tokens, descended, steps = totals[:n], totals[n], totals[n + 1], totals[n + 2]
    if tokens <= 0:
        return {}
    values = slack(spec, sums, tokens)
    metrics = {f"layer_loss/{layer}": (s / tokens).item() for layer, s in zip(spec.layers, sums, strict=True)}
    metrics.update({f"slack/{key}": v.item() for key, v in zip(spec.keys, values, strict=True)})
    if steps > 0:
        metrics["descent_fraction"] = (descended / steps).item()
    if len(values):
        metrics["feasible_fraction"] = values.le(0).double().mean().item()
    return metrics


class PrimalDual:
    def __init__(
        self,
        spec: DescentConstraints,
        enabled: bool = True,
        dual_optimizer: str = "sgd",
        dual_lr: float = 0.01,
        dual_init: float = 0.0,
        resilience: float = 0.0,
        dual_max: float | None = None,
        warmup_steps: int = 0,
        window: int = 20,
    ) -> None:
        self.spec = spec
        self.enabled = enabled
        self.warmup_steps = warmup_steps
        self.multipliers = Multipliers(len(spec), init=dual_init, upper=dual_max)
        self.dual = DualOptimizer(self.multipliers, dual_optimizer, dual_lr, resilience)
        self.train_stats = LayerStats(len(spec.layers))
        self.history: deque[dict[str, Any]] = deque(maxlen=window)
        self.skipped_steps = 0

    def active(self, global_step: int) -> bool:
        """Whether the penalty is in the loss and the multipliers move at this optimizer step."""
        return self.enabled and global_step >= self.warmup_steps

    def penalty(self, losses: LayerLosses) -> torch.Tensor:
        """Token-sum of sum_c lambda_c g_c for one micro-batch, differentiable in the layer losses."""
        return penalty(self.spec, self.multipliers.value(), losses.sums, losses.num_tokens)

    def step(self, global_step: int, reduce: Reduce) -> dict[str, float]:
        """
        End of an optimizer step: reduce the micro-batch totals over ranks, ascend on the global-batch slack when
        active, and return the step's metrics. Every rank computes the same update from the same reduced totals.
        """
        totals = self.train_stats.pop(reduce).cpu()
        metrics = stats_metrics(self.spec, totals)
        if not metrics:  # no supervised token in the whole global batch: nothing to measure, lambda unchanged
            return {}
        values = torch.tensor([metrics[f"slack/{k}"] for k in self.spec.keys], dtype=torch.float64)
        updated = False
        if self.active(global_step):
            updated = self.dual.step(values)
            if not updated:
                self.skipped_steps += 1
                logger.warning(
                    "Skipped the dual step at optimizer step %d: the slack is not finite (%s); multipliers kept.",
                    global_step,
                    values.tolist(),
                )
        lam = self.multipliers.value().tolist()
        self.history.append(
            {
                "step": global_step + 1,
                "layer_loss": [metrics[f"layer_loss/{layer}"] for layer in self.spec.layers],
                "slack": values.tolist(),
                "dual": lam,
                "descent_fraction": metrics.get("descent_fraction"),
                "dual_updated": updated,
            }
        )
        return metrics

    def dual_metrics(self) -> dict[str, float]:
        return {f"dual/{k}": v for k, v in zip(self.spec.keys, self.multipliers.value().tolist(), strict=True)}

    def summary(self) -> dict[str, Any]:
        """Feasibility over the recorded window: a constraint holds if its mean slack there is <= 0."""
        rows = list(self.history)
        mean = (
            (lambda key: torch.tensor([r[key] for r in rows], dtype=torch.float64).mean(0).tolist()) if rows else None
        )
        layer_loss, slack_mean = (mean("layer_loss"), mean("slack")) if rows else ([], [])
        holds = [s <= 0 for s in slack_mean]
        fractions = [r["descent_fraction"] for r in rows if r["descent_fraction"] is not None]
        return {
            "constraints": self.enabled,
            "layers": list(self.spec.layers),
            "alpha": list(self.spec.alphas),
            "epsilon": self.spec.epsilon,
            "window_steps": [rows[0]["step"], rows[-1]["step"]] if rows else None,
            "layer_loss": dict(zip(map(str, self.spec.layers), layer_loss, strict=False)),
            "dual": dict(zip(map(str, self.spec.keys), self.multipliers.value().tolist(), strict=True)),
            "slack": dict(zip(map(str, self.spec.keys), slack_mean, strict=False)),
            "holds": dict(zip(map(str, self.spec.keys), holds, strict=False)),
            "feasible": bool(rows) and all(holds),
            "descent_fraction": (sum(fractions) / len(fractions)) if fractions else None,
            "skipped_dual_steps": self.skipped_steps,
        }

    # Checkpointing: tensors for safetensors, the rest for JSON.
    def state_tensors(self) -> dict[str, torch.Tensor]:
        return self.dual.state_tensors()

    def state_json(self) -> dict[str, Any]:
        return {
            "spec": {"layers": list(self.spec.layers), "alpha": list(self.spec.alphas), "epsilon": self.spec.epsilon},
            "dual_optimizer": self.dual.state_json(),
            "history": list(self.history),
            "skipped_steps": self.skipped_steps,
        }

    def load_state(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        saved = meta["spec"]
        if saved["layers"] != list(self.spec.layers) or saved["epsilon"] != self.spec.epsilon:
            raise ValueError(
                f"The checkpoint constrains layers {saved['layers']} (epsilon={saved['epsilon']}) but this run "
                f"constrains {list(self.spec.layers)} (epsilon={self.spec.epsilon}); `constrained_layers` and "
                "`descent_epsilon` must match the run being resumed."
            )
        self.dual.load_state(tensors, meta["dual_optimizer"])
        self.history.clear()
        self.history.extend(meta.get("history", []))
        self.skipped_steps = int(meta.get("skipped_steps", 0))
