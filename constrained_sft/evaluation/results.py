"""
The results of a robustness evaluation as types, with their one JSON form (`results.json`, the layout earlier
versions wrote: `to_dict()` writes it, `from_dict()` reads it back, old files included). Reports, sweeps and studies
read these fields; a renamed field is then an error where it is read, not a blank cell in a report.

`settings` stays a mapping: it records how the run was made (the task's description, the level grid, sigma_x, ...),
read by name only where a report prints it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..tasks import Headline
from ..utils.files import write_json
from .bootstrap import Interval

RESULTS_JSON = "results.json"


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

    def to_dict(self) -> dict[str, Any]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "confidence": self.confidence,
                "verdict": self.verdict}  # fmt: skip


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

    def to_dict(self) -> dict[str, Any]:
        return {
            stat: {self.a: r.value_a, self.b: r.value_b, "seed_std": list(r.seed_std),
                   "difference": r.difference.to_dict()}
            for stat, r in self.rows.items()
        }  # fmt: skip

    @classmethod
    def from_dict(cls, name: str, rows: dict[str, Any]) -> Comparison:
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


@dataclass
class ModelResult:
    """One evaluated model. `summary`: per level and overall (`metrics.summarize`); `scores`: per level (str(gamma)),
    each per-unit score list summed over noise seeds, what the intervals resample."""

    path: str
    architecture: str
    noise_sigma_x_recorded: float | None
    layers: list[int]
    summary: dict[str, Any]
    scores: dict[str, dict[str, list[float]]]


@dataclass
class RobustnessResults:
    """Everything `eval robustness` measured and compared (`results.json`)."""

    settings: dict[str, Any]
    versions: dict[str, str]
    headline: Headline
    layer_curve: tuple[str, str]  # (per-layer key of a level's summary, its axis label)
    arms: dict[str, list[str]]  # arm -> its models' names, one per training seed
    models: dict[str, ModelResult] = field(default_factory=dict)
    bands: dict[str, Band] = field(default_factory=dict)
    comparisons: dict[str, Comparison] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)

    @property
    def gammas(self) -> list[float]:
        return self.settings["gammas"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "versions": self.versions,
            "headline": {"key": self.headline.key, "label": self.headline.label,
                         "higher_is_better": self.headline.higher_is_better},
            "layer_curve": {"key": self.layer_curve[0], "label": self.layer_curve[1]},
            "arms": self.arms,
            "models": {name: vars(m) for name, m in self.models.items()},
            "bands": {arm: vars(b) for arm, b in self.bands.items()},
            "comparisons": {name: c.to_dict() for name, c in self.comparisons.items()},
            "files": self.files,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RobustnessResults:
        return cls(
            settings=data["settings"],
            versions=data["versions"],
            headline=Headline(**data["headline"]),
            layer_curve=(data["layer_curve"]["key"], data["layer_curve"]["label"]),
            arms=data["arms"],
            models={name: ModelResult(**m) for name, m in data["models"].items()},
            bands={arm: Band(**b) for arm, b in data.get("bands", {}).items()},
            comparisons={name: Comparison.from_dict(name, rows) for name, rows in data["comparisons"].items()},
            files=data.get("files", {}),
        )

    def save(self, folder: str) -> str:
        """`<folder>/results.json`, written atomically; its path."""
        path = os.path.join(folder, RESULTS_JSON)
        write_json(path, self.to_dict())
        return path

    @classmethod
    def load(cls, folder: str) -> RobustnessResults | None:
        """The results saved in `folder`, None where there are none."""
        path = os.path.join(folder, RESULTS_JSON)
        if not os.path.isfile(path):
            return None
        with open(path) as f:
            return cls.from_dict(json.load(f))
