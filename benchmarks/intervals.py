"""
The benchmarks' intervals: a 95% Student-t interval of a mean over repeats (fresh processes or rounds), and of a
geometric mean of ratios (on their logarithms: a timing ratio's noise is multiplicative). One repeat has no spread to
measure: its interval is the value itself, and the row's repeat count says so.

Shared by the benchmarks (imported as a sibling module: each runs as `python benchmarks/<name>.py`).
"""

from __future__ import annotations

import math
import statistics


def t_interval(values: list[float]) -> tuple[float, float]:
    """95% t-interval of the mean of `values`."""
    from scipy import stats

    if len(values) < 2:
        return values[0], values[0]
    mean, sem = statistics.fmean(values), statistics.stdev(values) / len(values) ** 0.5
    half = stats.t.ppf(0.975, len(values) - 1) * sem
    return mean - half, mean + half


def ratio_interval(ratios: list[float]) -> tuple[float, tuple[float, float]]:
    """The geometric mean of `ratios` and its 95% t-interval."""
    logs = [math.log(r) for r in ratios]
    low, high = t_interval(logs)
    return math.exp(statistics.fmean(logs)), (math.exp(low), math.exp(high))
