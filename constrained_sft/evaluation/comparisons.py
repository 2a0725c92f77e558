"""A comparison of two arms as types (every report, sweep and study shows them): statistic by statistic, each arm's
value and spread over training seeds, and A - B with its paired-bootstrap interval and verdict; an arm's band."""

from __future__ import annotations

from dataclasses import dataclass

from ..utils.types import JSONObject, JSONRead
from .bootstrap import Interval


@dataclass(frozen=True)
class Difference:
    """A - B on the observed data with its paired-bootstrap interval and verdict (better / same / worse for A)."""

    estimate: float
    low: float
    high: float
    confidence: float
    verdict: str

    @classmethod
    def of(cls, interval: Interval) -> Difference:
        return cls(interval.estimate, interval.low, interval.high, interval.confidence, interval.verdict)

    def to_dict(self) -> JSONObject:
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class StatisticRow:
    """One statistic of a comparison: its value for each arm (every seed and unit pooled), its spread over training
    seeds per arm, and the difference."""

    value_a: float
    value_b: float
    seed_std: tuple[float, float]
    difference: Difference


@dataclass
class Comparison:
    """Arm `a` against arm `b` (paired by training seed), statistic by statistic, in the order they were computed."""

    a: str
    b: str
    rows: dict[str, StatisticRow]

    @property
    def name(self) -> str:
        return f"{self.a} - {self.b}"

    def to_dict(self) -> JSONObject:
        return {
            stat: {
                self.a: r.value_a,
                self.b: r.value_b,
                "seed_std": list(r.seed_std),
                "difference": r.difference.to_dict(),
            }
            for stat, r in self.rows.items()
        }

    @classmethod
    def from_dict(cls, name: str, rows: JSONRead) -> Comparison:
        a, b = name.split(" - ")
        return cls(
            a,
            b,
            {
                stat: StatisticRow(r[a], r[b], tuple(r["seed_std"]), Difference(**r["difference"]))
                for stat, r in rows.items()
            },
        )


@dataclass(frozen=True)
class Band:
    """An arm's headline at every level with its bootstrap interval over seeds and units (the plots' band)."""

    value: list[float]
    low: list[float]
    high: list[float]
