"""
Comparisons between arms (model families, one model per training seed) on one held-out set: every reported statistic
with its value per arm, its spread over training seeds, and A - B with a 95% paired-bootstrap interval and a verdict.

Statistics, each computed as its metric is defined (from unit scores pooled over the resampled seeds and units):
the headline at every level (`<key>@<gamma>`), its mean over the ID levels (gamma <= the training level) and over
the OOD levels, its AUC over the grid, its change from the smallest to the largest level (the paper's reading of
robustness: how much is lost), and the descent share (descending / all per-sample layer steps, mean over levels).
The headline's direction (accuracy up, RMSE down) sets the verdict of all but the descent share (higher: more
descent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ...noise import NoiseGrid
from ..bootstrap import Scores, Statistic, bootstrap_interval, paired_bootstrap, total
from ..comparisons import Band, Comparison, Difference, StatisticRow
from .results import RobustnessResults

if TYPE_CHECKING:  # the tasks' classes are not imported to run this module
    from ..tasks import Task


def statistics(task: Task, gammas: NoiseGrid, train_gamma: float) -> list[Statistic]:
    """The comparison's statistics for `task` over the level grid `gammas`."""
    key, up = task.headline.key, task.headline.higher_is_better
    g = np.asarray(gammas.levels, dtype=np.float64)
    ind, ood = gammas.split(train_gamma)
    low, high = int(np.argmin(g)), int(np.argmax(g))

    def at_level(k: int) -> Callable[[Scores], np.ndarray]:  # the metric at the k-th level, per resample
        return lambda s: task.measuring.metric(s)[..., k]

    out = [Statistic(f"{key}@{x:g}", at_level(k), up) for k, x in enumerate(gammas)]
    if ind.any():
        out.append(Statistic(f"id_{key}", lambda s: task.measuring.metric(s)[..., ind].mean(-1), up))
    if ood.any():
        out.append(Statistic(f"ood_{key}", lambda s: task.measuring.metric(s)[..., ood].mean(-1), up))
    if len(gammas) > 1:
        out.append(Statistic("auc", lambda s: np.trapezoid(task.measuring.metric(s), g, axis=-1), up))
        out.append(
            Statistic(
                f"change {g[low]:g}->{g[high]:g}",
                lambda s: (m := task.measuring.metric(s))[..., high] - m[..., low],
                up,
            )
        )
    out.append(Statistic("descent_share", lambda s: (s["descents"] / s["steps"]).mean(-1), True))
    return out


def arm_scores(results: RobustnessResults, names: list[str]) -> Scores:
    """The unit scores `[K, S, N]` of the models `names` (one per training seed) as `eval robustness` saved them."""
    gammas = results.gammas
    keys = results.models[names[0]].scores[gammas.key(gammas[0])]
    return {
        key: np.array([[results.models[n].scores[gammas.key(g)][key] for n in names] for g in gammas], np.float64)
        for key in keys
    }


def compare(
    results: RobustnessResults, task: Task, pairs: list[tuple[str, str]], n_boot: int = 2000, confidence: float = 0.95
) -> dict[str, Comparison]:
    """{'A - B': the comparison} for each (A, B) of `pairs`, arms of `results.arms` with the same number of
    training seeds (paired by position)."""
    stats = statistics(task, results.gammas, results.settings.train_gamma)
    check_pairs({arm: len(names) for arm, names in results.arms.items()}, pairs)
    out = {}
    for a, b in pairs:
        members = results.arms[a], results.arms[b]
        sa, sb = arm_scores(results, members[0]), arm_scores(results, members[1])
        intervals = paired_bootstrap(sa, sb, stats, n_boot=n_boot, confidence=confidence)
        whole = {a: total(sa), b: total(sb)}
        per_seed = {arm: _per_seed(scores) for arm, scores in ((a, sa), (b, sb))}
        rows = {
            s.name: StatisticRow(
                value_a=float(s.compute(whole[a])),
                value_b=float(s.compute(whole[b])),
                seed_std=(float(np.std(s.compute(per_seed[a]))), float(np.std(s.compute(per_seed[b])))),
                difference=Difference.of(intervals[s.name]),
            )
            for s in stats
        }
        comparison = Comparison(a, b, rows)
        out[comparison.name] = comparison
    return out


def check_pairs(sizes: dict[str, int], pairs: list[tuple[str, str]]) -> None:
    """Each compared pair: two known arms with the same number of models (training seeds are paired by position)."""
    for a, b in pairs:
        if a not in sizes or b not in sizes:
            raise ValueError(f"Comparison {a!r} - {b!r}: both must be arms, of {list(sizes)}.")
        if sizes[a] != sizes[b]:
            raise ValueError(
                f"Arms {a!r} and {b!r} have {sizes[a]} and {sizes[b]} models; a paired comparison needs one model per "
                "training seed in each, the same number of seeds."
            )


def _per_seed(scores: Scores) -> dict[str, np.ndarray]:
    """Sums over units for each training seed: `{key: [S, K]}`."""
    return {k: v.sum(-1).T for k, v in scores.items()}


def bands(results: RobustnessResults, task: Task, n_boot: int = 2000, confidence: float = 0.95) -> dict[str, Band]:
    """Each arm's headline at every level with a bootstrap interval over its seeds and units (the plots' bands)."""
    headline = Statistic(task.headline.key, task.measuring.metric, task.headline.higher_is_better)
    out = {}
    for arm, names in results.arms.items():
        value, low, high = bootstrap_interval(arm_scores(results, names), headline, n_boot, confidence)
        out[arm] = Band(value.tolist(), low.tolist(), high.tolist())
    return out
