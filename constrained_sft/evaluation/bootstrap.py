"""
One paired bootstrap for every comparison, any statistic, every task.

A model family (an *arm*) is given as unit scores `[K, S, N]` per key (`levels.Scores` stacked): noise level k,
training seed s, held-out unit i (a sequence, an example or a clip), each the per-unit sum over noise seeds. A
*statistic* maps scores summed over a set of (seed, unit) pairs, `{key: [..., K]}`, to a number per leading index:
token accuracy at one level is correct / count of the pooled tokens, RMSE the root of the pooled squared error, the
AUC a trapezoid over the levels of either. Each resample draws S seeds and N units with replacement, the same draw
for both arms (paired: seed s of A faces seed s of B, and both see the same noisy unit), sums the drawn scores and
recomputes the statistic; the interval is the percentile interval of A - B. Written here because no library
bootstraps a ratio of pooled sums over two crossed factors (scipy's `bootstrap` resamples one axis).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

Scores = dict[str, np.ndarray]  # key -> [K, S, N]


@dataclass(frozen=True)
class Interval:
    estimate: float  # the difference on the data as observed
    low: float
    high: float
    confidence: float
    higher_is_better: bool = True

    @property
    def verdict(self) -> str:
        """'better' / 'worse' when the whole interval lies on the good / bad side of 0, else 'same'."""
        return verdict(self.low, self.high, self.higher_is_better)

    def to_dict(self) -> dict:
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "verdict": self.verdict,
        }


def verdict(low: float, high: float, higher_is_better: bool = True) -> str:
    """The one better / same / worse rule: an interval of A - B wholly above 0 means A is higher (better when higher
    is better, worse otherwise), wholly below 0 the reverse, and one that contains 0 says 'same'."""
    if low > 0:
        return "better" if higher_is_better else "worse"
    if high < 0:
        return "worse" if higher_is_better else "better"
    return "same"


@dataclass(frozen=True)
class Statistic:
    """A number computed from summed unit scores `{key: [..., K]}` -> `[...]`, and its direction."""

    name: str
    compute: Callable[[dict[str, np.ndarray]], np.ndarray]
    higher_is_better: bool = True


def total(scores: Scores) -> dict[str, np.ndarray]:
    """Scores summed over every seed and unit: `{key: [K]}`."""
    return {k: v.sum((1, 2)) for k, v in scores.items()}


def check_shapes(arms: Sequence[Scores]) -> tuple[int, int, int]:
    """(K, S, N) shared by every array of every arm; anything else is refused."""
    shapes = {v.shape for scores in arms for v in scores.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 3 or 0 in next(iter(shapes)):
        raise ValueError(f"Unit scores must be non-empty [levels, seeds, units] arrays of one shape, got {shapes}.")
    return next(iter(shapes))


def resampled_sums(arms: Sequence[Scores], n_boot: int, seed: int = 0, chunk: int = 250) -> Iterator[list[dict]]:
    """
    Per chunk of resamples, each arm's scores summed over the drawn (seed, unit) pairs, `{key: [b, K]}`; every arm
    gets the same draw. Cost: n_boot x K x S x N additions per key and arm, in chunks of `chunk` resamples.
    """
    _, S, N = check_shapes(arms)
    rng = np.random.default_rng(seed)
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        rows = rng.integers(0, S, size=(b, S))  # [b, S] resampled seeds
        cols = rng.integers(0, N, size=(b, N))  # [b, N] resampled units
        out = []
        for scores in arms:
            sums = {}
            for key, value in scores.items():  # value [K, S, N]
                per_level = []
                for level in value:  # [S, N] -> [b, S]: each seed's sum over the drawn units
                    row_sums = level[:, cols].sum(-1).T
                    per_level.append(np.take_along_axis(row_sums, rows, axis=1).sum(1))  # [b]
                sums[key] = np.stack(per_level, axis=1)  # [b, K]
            out.append(sums)
        yield out


def paired_bootstrap(
    a: Scores,
    b: Scores,
    statistics: Sequence[Statistic],
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Interval]:
    """The percentile interval of statistic(A) - statistic(B) for every statistic, from one set of paired draws."""
    if not 0 < confidence < 1:
        raise ValueError(f"`confidence` must be in (0, 1), got {confidence}.")
    draws: dict[str, list[np.ndarray]] = {s.name: [] for s in statistics}
    for sums_a, sums_b in resampled_sums([a, b], n_boot, seed):
        for s in statistics:
            draws[s.name].append(s.compute(sums_a) - s.compute(sums_b))
    whole_a, whole_b = total(a), total(b)
    tail = (1 - confidence) / 2
    out = {}
    for s in statistics:
        low, high = np.nanquantile(np.concatenate(draws[s.name]), [tail, 1 - tail])
        estimate = float(s.compute(whole_a) - s.compute(whole_b))
        out[s.name] = Interval(estimate, float(low), float(high), confidence, s.higher_is_better)
    return out


def bootstrap_interval(
    scores: Scores, statistic: Statistic, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, low, high) of a statistic of one arm, elementwise (e.g. `[K]`: the headline at every level), by the
    same resampling of seeds and units: the bands of the report's plots."""
    draws = [statistic.compute(sums[0]) for sums in resampled_sums([scores], n_boot, seed)]
    tail = (1 - confidence) / 2
    low, high = np.nanquantile(np.concatenate(draws), [tail, 1 - tail], axis=0)
    return statistic.compute(total(scores)), low, high
