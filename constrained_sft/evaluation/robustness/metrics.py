"""
The arithmetic of a robustness evaluation, on plain numbers: per-sample layer ratios and descents, AUC over the noise
levels, and the per-level summary of one model (`results.ModelSummary`). The grid and its ID / OOD split are
`noise.NoiseGrid`'s.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np
import torch

from ...constraints import LayerLosses
from ...noise import NoiseGrid
from .results import LevelSummary, ModelSummary

RATIO_BINS = np.linspace(0.0, 2.0, 41)  # histogram of f_l / f_{l-1}; values above 2 land in the last bin


def step_ratios(losses: LayerLosses) -> torch.Tensor:
    """`[(n-1) * S']` ratios f_l / f_{l-1} of every sequence with supervised tokens, for every consecutive layer pair."""
    per_seq = losses.per_sequence[:, losses.segment_tokens.gt(0)]  # [n, S']
    return (per_seq[1:] / per_seq[:-1].clamp(min=1e-12)).flatten()


def example_descents(losses: LayerLosses) -> tuple[torch.Tensor, torch.Tensor]:
    """(descending layer steps, layer steps) of each sequence `[S]`; 0 and 0 for one without supervised tokens."""
    valid = losses.segment_tokens.gt(0)  # [S]
    down = (losses.per_sequence[1:] < losses.per_sequence[:-1]).sum(0)  # [S]
    steps = torch.full_like(down, losses.per_sequence.shape[0] - 1)
    return down * valid, steps * valid


def auc(gammas: Sequence[float], values: Sequence[float] | np.ndarray) -> float:
    """Trapezoidal area under values(gamma)."""
    return float(np.trapezoid(values, gammas)) if len(gammas) > 1 else math.nan


def summarize(levels: list[list], train_gamma: float, extras=None) -> ModelSummary:
    """
    One model's `[level][noise seed]` results (`levels.LevelResult`): per level the mean and std over noise seeds of
    the headline and the loss, layer losses, descent share and layer-ratio distribution; then the AUC of the headline
    over the levels, its ID (gamma <= train) and OOD (gamma > train) means, and the loss's mean over the levels.
    `extras(layer_loss)`: a task's own per-layer curves ({curve key: {layer: value}}) from the layer losses.
    """
    rows = []
    for per_seed in levels:
        value = [r.metric for r in per_seed]
        loss = [r.loss for r in per_seed]
        ratios = np.concatenate([r.ratios for r in per_seed])
        hist, _ = np.histogram(np.clip(ratios, RATIO_BINS[0], RATIO_BINS[-1]), bins=RATIO_BINS)
        layers = per_seed[0].layer_loss
        layer_loss = {str(layer): statistics.fmean(r.layer_loss[layer] for r in per_seed) for layer in layers}
        rows.append(
            LevelSummary(
                gamma=per_seed[0].gamma,
                metric_mean=statistics.fmean(value),
                metric_std=statistics.pstdev(value),
                loss_mean=statistics.fmean(loss),
                loss_std=statistics.pstdev(loss),
                curves={"layer_loss": layer_loss, **(extras(layer_loss) if extras else {})},
                descent_share=statistics.fmean(r.descent_share for r in per_seed),
                ratio_mean=float(ratios.mean()) if ratios.size else math.nan,
                ratio_median=float(np.median(ratios)) if ratios.size else math.nan,
                ratio_edges=RATIO_BINS.tolist(),
                ratio_counts=hist.tolist(),
                seeds=[r.seed for r in per_seed],
            )
        )
    grid = NoiseGrid(tuple(r.gamma for r in rows))
    values = np.array([r.metric_mean for r in rows])
    ind, ood = grid.split(train_gamma)
    return ModelSummary(
        train_gamma=train_gamma,
        levels=rows,
        auc=auc(grid.levels, values),
        id_metric=statistics.fmean(values[ind]) if ind.any() else math.nan,
        ood_metric=statistics.fmean(values[ood]) if ood.any() else math.nan,
        descent_share=statistics.fmean(r.descent_share for r in rows),
        loss=statistics.fmean(r.loss_mean for r in rows),  # held-out loss, mean over the levels
    )
