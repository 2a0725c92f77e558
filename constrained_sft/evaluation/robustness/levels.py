"""
One model at one noise level with one noise stream, for every task: every held-out batch through the training code
path (the task's measuring trainer: token selection, readout, probe, noise hook), so the numbers agree with what
training logged; per-example scores summed into the task's units (sequences, examples, clips).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from .metrics import example_descents, step_ratios

if TYPE_CHECKING:  # the tasks' classes are not imported to run this module
    from ..tasks import Task

Scores = dict[str, np.ndarray]  # per unit: count, loss, (correct), descents, steps


@dataclass
class LevelResult:
    """One model at one noise level with one noise seed."""

    gamma: float
    seed: int
    metric: float  # the task's headline over every held-out unit (token accuracy, accuracy, RMSE)
    loss: float  # final-layer loss per count (token NLL, cross-entropy, squared error)
    layer_loss: dict[int, float]
    descent_share: float  # share of (sequence, layer step) pairs with f_l < f_{l-1}
    ratios: np.ndarray = field(repr=False)  # f_l / f_{l-1} for every (sequence, step)
    scores: Scores = field(repr=False)  # `[N]` per unit, in held-out order


def unit_sums(examples: dict[str, torch.Tensor], units: torch.Tensor | None) -> Scores:
    """Per-example scores `[E]` summed into units `[N]` (`units[e]` = the unit of example e; None: one each)."""
    if units is None:
        return {k: v.double().numpy() for k, v in examples.items()}
    n = int(units.max()) + 1 if units.numel() else 0
    return {
        k: torch.zeros(n, dtype=torch.float64).index_add_(0, units, v.double()).numpy() for k, v in examples.items()
    }


@torch.no_grad()
def evaluate_level(
    task: Task, trainer, gamma: float, seed: int, mean: float = 0.0, progress: Callable[[], None] | None = None
) -> LevelResult:
    """Every held-out batch of `trainer` (a task's measuring or training trainer) at noise level `gamma` with noise
    stream `seed`, at the trainer's sigma_x."""
    spec = trainer.primal_dual.spec
    parts: dict[str, list[torch.Tensor]] = defaultdict(list)
    layer_sums = torch.zeros(len(spec.layers), dtype=torch.float64)
    tokens = 0.0
    ratios: list[torch.Tensor] = []
    with trainer.noise.at_level(trainer.model, gamma, seed, mean):  # the trainer's own noise, at its sigma_x
        for batch in trainer.get_eval_dataloader():
            score = task.measuring.score(trainer, batch)
            descents, steps = example_descents(score.layers)
            for key, value in (*score.examples.items(), ("descents", descents), ("steps", steps)):
                parts[key].append(value.detach().cpu())
            layer_sums += score.layers.sums.detach().double().cpu()
            tokens += score.layers.num_tokens.item()
            ratios.append(step_ratios(score.layers).cpu())
            if progress is not None:
                progress()
    scores = unit_sums({k: torch.cat(v) for k, v in parts.items()}, task.measuring.units(trainer.eval_dataset))
    totals = {k: v.sum() for k, v in scores.items()}
    if totals["count"] == 0:
        raise ValueError("The held-out dataset has no supervised token to evaluate.")
    ratio = torch.cat(ratios) if ratios else torch.zeros(0)
    return LevelResult(
        gamma=gamma,
        seed=seed,
        metric=float(task.measuring.metric(totals)),
        loss=float(totals["loss"] / totals["count"]),
        layer_loss={layer: (s / tokens).item() for layer, s in zip(spec.layers, layer_sums, strict=True)},
        descent_share=float(totals["descents"] / totals["steps"]) if totals["steps"] else math.nan,
        ratios=ratio.double().numpy(),
        scores=scores,
    )
