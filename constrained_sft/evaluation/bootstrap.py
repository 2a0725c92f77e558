"""
Paired bootstrap confidence intervals for a difference between two models evaluated on the same test examples.

Every statistic the comparison reports (accuracy at one gamma, ID / OOD accuracy, the AUC over the gamma grid) is a
mean over (training seed, test example) of a per-example score, so one function covers them all: it takes the
per-example differences `d[s, i]` = score of model A minus score of model B for training seed s and example i, and
resamples seeds and examples with replacement, the same draw for both models (paired: A and B see the same noisy
example, and seed s of A is compared with seed s of B).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Interval:
    estimate: float  # the difference on the data as observed
    low: float
    high: float
    confidence: float

    @property
    def verdict(self) -> str:
        """'better' / 'worse' when the whole interval lies above / below 0, else 'same'."""
        return "better" if self.low > 0 else "worse" if self.high < 0 else "same"

    def to_dict(self) -> dict:
        return {**asdict(self), "verdict": self.verdict}


def paired_bootstrap(
    diff: np.ndarray, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0, chunk: int = 250
) -> Interval:
    """Percentile interval of mean(d) from `n_boot` resamples of the rows (seeds) and columns (examples) of `diff`
    `[S, N]`. Cost: n_boot * S * N additions, in chunks of `chunk` resamples."""
    diff = np.asarray(diff, dtype=np.float64)
    if diff.ndim != 2 or diff.size == 0:
        raise ValueError(f"`diff` must be a non-empty [seeds, examples] array, got shape {diff.shape}.")
    if not 0 < confidence < 1:
        raise ValueError(f"`confidence` must be in (0, 1), got {confidence}.")
    S, N = diff.shape
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        rows = rng.integers(0, S, size=(b, S))  # [b, S] resampled seeds
        cols = rng.integers(0, N, size=(b, N))  # [b, N] resampled examples
        # mean over (s, i) of diff[rows[s], cols[i]] = mean over s of (column-resampled row means)
        picked = diff[:, cols]  # [S, b, N]
        row_means = picked.mean(-1).T  # [b, S]
        means[start : start + b] = np.take_along_axis(row_means, rows, axis=1).mean(1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Interval(float(diff.mean()), float(low), float(high), confidence)
