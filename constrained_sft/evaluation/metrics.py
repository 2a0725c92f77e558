"""
The arithmetic of a robustness evaluation, on plain numbers: per-level results, per-sample layer ratios, AUC over
the noise levels, ID / OOD accuracy, and differences between two models.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..constraints import LayerLosses

RATIO_BINS = np.linspace(0.0, 2.0, 41)  # histogram of f_l / f_{l-1}; values above 2 land in the last bin


@dataclass
class LevelResult:
    """One model at one noise level with one noise seed."""

    gamma: float
    seed: int
    accuracy: float  # final-layer top-1 accuracy on supervised tokens (classifiers: examples)
    loss: float  # final-layer mean NLL
    layer_loss: dict[int, float]
    descent_share: float  # share of (sequence, layer step) pairs with f_l < f_{l-1}
    ratios: list[float] = field(repr=False)  # f_l / f_{l-1} for every (sequence, step)
    hits: str = field(default="", repr=False)  # classifiers: '1' / '0' per held-out example, in dataset order


def step_ratios(losses: LayerLosses) -> torch.Tensor:
    """`[(n-1) * S']` ratios f_l / f_{l-1} of every sequence with supervised tokens, for every consecutive layer pair."""
    per_seq = losses.per_sequence[:, losses.segment_tokens.gt(0)]  # [n, S']
    return (per_seq[1:] / per_seq[:-1].clamp(min=1e-12)).flatten()


def auc(gammas: Sequence[float], values: Sequence[float]) -> float:
    """Trapezoidal area under values(gamma)."""
    return float(np.trapezoid(values, gammas)) if len(gammas) > 1 else math.nan


def summarize(levels: list[list[LevelResult]], train_gamma: float) -> dict[str, Any]:
    """Mean and std over seeds at each gamma, then AUC, ID (gamma <= train) and OOD (gamma > train) accuracy."""
    rows = []
    for per_seed in levels:
        acc = [r.accuracy for r in per_seed]
        loss = [r.loss for r in per_seed]
        ratios = np.array([x for r in per_seed for x in r.ratios])
        hist, _ = np.histogram(np.clip(ratios, RATIO_BINS[0], RATIO_BINS[-1]), bins=RATIO_BINS)
        layers = per_seed[0].layer_loss
        rows.append(
            {
                "gamma": per_seed[0].gamma,
                "accuracy_mean": statistics.fmean(acc),
                "accuracy_std": statistics.pstdev(acc),
                "loss_mean": statistics.fmean(loss),
                "loss_std": statistics.pstdev(loss),
                "layer_loss": {
                    str(layer): statistics.fmean(r.layer_loss[layer] for r in per_seed) for layer in layers
                },
                "descent_share": statistics.fmean(r.descent_share for r in per_seed),
                "ratio_mean": float(ratios.mean()) if ratios.size else math.nan,
                "ratio_median": float(np.median(ratios)) if ratios.size else math.nan,
                "ratio_histogram": {"edges": RATIO_BINS.tolist(), "counts": hist.tolist()},
                "seeds": [r.seed for r in per_seed],
            }
        )
    gammas = [r["gamma"] for r in rows]
    acc = [r["accuracy_mean"] for r in rows]
    ind = [a for g, a in zip(gammas, acc, strict=True) if g <= train_gamma]
    ood = [a for g, a in zip(gammas, acc, strict=True) if g > train_gamma]
    return {
        "train_gamma": train_gamma,
        "levels": rows,
        "auc": auc(gammas, acc),
        "id_accuracy": statistics.fmean(ind) if ind else math.nan,
        "ood_accuracy": statistics.fmean(ood) if ood else math.nan,
        "descent_share": statistics.fmean(r["descent_share"] for r in rows),
    }


def differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """a - b for the summary numbers and at every gamma (accuracy and descent share)."""
    keys = ("auc", "id_accuracy", "ood_accuracy", "descent_share")
    by_gamma = {r["gamma"]: r for r in b["levels"]}
    return {
        **{k: a[k] - b[k] for k in keys},
        "per_gamma": [
            {
                "gamma": r["gamma"],
                "accuracy": r["accuracy_mean"] - by_gamma[r["gamma"]]["accuracy_mean"],
                "descent_share": r["descent_share"] - by_gamma[r["gamma"]]["descent_share"],
            }
            for r in a["levels"]
            if r["gamma"] in by_gamma
        ],
    }
