"""
The results of a robustness evaluation as types, with their one JSON form (`results.json`, the layout earlier
versions wrote: `to_dict()` writes it, `from_dict()` reads it back, the published files included). Reports, sweeps and
studies read these fields; a renamed field is then an error where it is read, not a blank cell in a report.

The JSON names a level's headline by the task's key (`accuracy_mean`, `id_rmse`, ...); the types call it `metric`
and take the key from the results' `headline` when they are written or read.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import ClassVar, TypeAlias

from ...noise import NoiseGrid
from ...tasks import Headline
from ...utils.fields import known_keys
from ...utils.files import read_saved, write_json
from ...utils.types import JSONObject, JSONRead
from ..comparisons import Band, Comparison
from ..report.result_folder import ResultsFolder

RESULTS_JSON = "results.json"


@dataclass(frozen=True)
class RobustnessFolder(ResultsFolder):
    """`eval robustness`'s folder: results.json (`RobustnessResults`), results.csv, its plots and its part of
    report.html."""

    RESULTS: ClassVar[str] = RESULTS_JSON

    @property
    def results_csv(self) -> str:
        return os.path.join(self.root, "results.csv")


# a report's files: name -> path ("json", "csv", "html", each plot), and "figures": a task's extra figures, name -> path
ReportFiles: TypeAlias = "dict[str, str | dict[str, str]]"


VLM_FIELDS = ("noise_modality", "image_sigma", "image_sigma_source")  # added for VLMs, written where not the default


@dataclass
class RobustnessSettings:
    """How an evaluation was made: the held-out data and its description, the level grid and the noise, the scale
    sigma_x (and where it came from), the precision and batching, the intervals' resamples."""

    description: str
    task: str
    dataset: JSONObject  # the data fields the held-out rows were read with, as given
    gammas: NoiseGrid
    curve_gammas: list[float]
    seeds: int
    train_gamma: float
    noise_mean: float
    sigma_x: float | None
    sigma_x_source: str | None
    dtype: str
    batch_size: int
    max_length: int
    bootstrap_samples: int
    held_out_rows: int | None = None
    noise_modality: str = "both"  # a VLM's perturbed inputs, and its image-feature scale (and where it came from)
    image_sigma: float | None = None
    image_sigma_source: str | None = None

    def to_dict(self) -> JSONObject:
        """The settings as results.json holds them; the VLM fields only where they say something (a text model's
        results read as the previous release wrote them)."""
        unset = {
            f.name for f in dataclasses.fields(self) if f.name in VLM_FIELDS and getattr(self, f.name) == f.default
        }
        return {**{k: v for k, v in vars(self).items() if k not in unset}, "gammas": self.gammas.to_list()}

    @classmethod
    def from_dict(cls, data: JSONRead) -> RobustnessSettings:
        known_keys(cls, data, "robustness settings")
        return cls(**{**data, "gammas": NoiseGrid(tuple(data["gammas"]))})


@dataclass
class LevelSummary:
    """One model at one level, over its noise seeds: the headline's mean and spread, the loss's, the per-layer curves
    (`layer_loss`, and a task's own, e.g. `layer_rmse`), the descent share and the layer-step ratios."""

    gamma: float
    metric_mean: float
    metric_std: float
    loss_mean: float
    loss_std: float
    curves: dict[str, dict[str, float]]  # curve key -> {layer: value}
    descent_share: float
    ratio_mean: float
    ratio_median: float
    ratio_edges: list[float]
    ratio_counts: list[int]
    seeds: list[int]

    def to_dict(self, key: str) -> JSONObject:
        return {
            "gamma": self.gamma,
            f"{key}_mean": self.metric_mean,
            f"{key}_std": self.metric_std,
            "loss_mean": self.loss_mean,
            "loss_std": self.loss_std,
            **self.curves,
            "descent_share": self.descent_share,
            "ratio_mean": self.ratio_mean,
            "ratio_median": self.ratio_median,
            "ratio_histogram": {"edges": self.ratio_edges, "counts": self.ratio_counts},
            "seeds": self.seeds,
        }

    @classmethod
    def from_dict(cls, data: JSONRead, key: str) -> LevelSummary:
        fixed = {
            "gamma",
            f"{key}_mean",
            f"{key}_std",
            "loss_mean",
            "loss_std",
            "descent_share",
            "ratio_mean",
            "ratio_median",
            "ratio_histogram",
            "seeds",
        }
        if unknown := sorted(k for k in set(data) - fixed if not k.startswith("layer_")):
            raise ValueError(f"level summary: unknown key(s) {unknown}; known: {sorted(fixed)} and layer_* curves")
        return cls(
            gamma=data["gamma"],
            metric_mean=data[f"{key}_mean"],
            metric_std=data[f"{key}_std"],
            loss_mean=data["loss_mean"],
            loss_std=data["loss_std"],
            curves={k: v for k, v in data.items() if k.startswith("layer_") and isinstance(v, dict)},
            descent_share=data["descent_share"],
            ratio_mean=data["ratio_mean"],
            ratio_median=data["ratio_median"],
            ratio_edges=data["ratio_histogram"]["edges"],
            ratio_counts=data["ratio_histogram"]["counts"],
            seeds=data["seeds"],
        )


@dataclass
class ModelSummary:
    """One model over the grid: each level's summary, the headline's AUC and its means in (gamma <= the training
    level) and out of distribution, the descent share and the loss (means over the levels)."""

    train_gamma: float
    levels: list[LevelSummary]
    auc: float
    id_metric: float
    ood_metric: float
    descent_share: float
    loss: float

    def level(self, gamma: float) -> LevelSummary:
        """The summary at level `gamma`."""
        return next(row for row in self.levels if row.gamma == gamma)

    def to_dict(self, key: str) -> JSONObject:
        return {
            "train_gamma": self.train_gamma,
            "levels": [row.to_dict(key) for row in self.levels],
            "auc": self.auc,
            f"id_{key}": self.id_metric,
            f"ood_{key}": self.ood_metric,
            "descent_share": self.descent_share,
            "loss": self.loss,
        }

    @classmethod
    def from_dict(cls, data: JSONRead, key: str) -> ModelSummary:
        return cls(
            train_gamma=data["train_gamma"],
            levels=[LevelSummary.from_dict(row, key) for row in data["levels"]],
            auc=data["auc"],
            id_metric=data[f"id_{key}"],
            ood_metric=data[f"ood_{key}"],
            descent_share=data["descent_share"],
            loss=data["loss"],
        )


@dataclass
class ModelResult:
    """One evaluated model. `scores`: per level (`NoiseGrid.key`), each per-unit score list summed over noise seeds,
    what the intervals resample."""

    path: str
    architecture: str
    noise_sigma_x_recorded: float | None
    layers: list[int]
    summary: ModelSummary
    scores: dict[str, dict[str, list[float]]]

    def to_dict(self, key: str) -> JSONObject:
        return {**vars(self), "summary": self.summary.to_dict(key)}

    @classmethod
    def from_dict(cls, data: JSONRead, key: str) -> ModelResult:
        return cls(**{**data, "summary": ModelSummary.from_dict(data["summary"], key)})


@dataclass
class RobustnessResults:
    """Everything `eval robustness` measured and compared (`results.json`)."""

    settings: RobustnessSettings
    versions: dict[str, str]
    headline: Headline
    layer_curve: tuple[str, str]  # (per-layer key of a level's summary, its axis label)
    arms: dict[str, list[str]]  # arm -> its models' names, one per training seed
    models: dict[str, ModelResult] = field(default_factory=dict)
    bands: dict[str, Band] = field(default_factory=dict)
    comparisons: dict[str, Comparison] = field(default_factory=dict)
    files: ReportFiles = field(default_factory=dict)

    @property
    def gammas(self) -> NoiseGrid:
        return self.settings.gammas

    @property
    def summaries(self) -> dict[str, ModelSummary]:
        """Each model's summary, by name."""
        return {name: m.summary for name, m in self.models.items()}

    def to_dict(self) -> JSONObject:
        key = self.headline.key
        return {
            "settings": self.settings.to_dict(),
            "versions": self.versions,
            "headline": {"key": key, "label": self.headline.label, "higher_is_better": self.headline.higher_is_better},
            "layer_curve": {"key": self.layer_curve[0], "label": self.layer_curve[1]},
            "arms": self.arms,
            "models": {name: m.to_dict(key) for name, m in self.models.items()},
            "bands": {arm: vars(b) for arm, b in self.bands.items()},
            "comparisons": {name: c.to_dict() for name, c in self.comparisons.items()},
            "files": self.files,
        }

    @classmethod
    def from_dict(cls, data: JSONRead) -> RobustnessResults:
        known_keys(cls, data, "robustness results")
        headline = Headline(**data["headline"])
        return cls(
            settings=RobustnessSettings.from_dict(data["settings"]),
            versions=data["versions"],
            headline=headline,
            layer_curve=(data["layer_curve"]["key"], data["layer_curve"]["label"]),
            arms=data["arms"],
            models={name: ModelResult.from_dict(m, headline.key) for name, m in data["models"].items()},
            bands={arm: Band(**b) for arm, b in data.get("bands", {}).items()},
            comparisons={name: Comparison.from_dict(name, rows) for name, rows in data["comparisons"].items()},
            files=data.get("files", {}),
        )

    def save(self, folder: str) -> str:
        """`<folder>/results.json`, written atomically; its path."""
        path = RobustnessFolder(folder).results_json
        write_json(path, self.to_dict())
        return path

    @classmethod
    def load(cls, folder: str) -> RobustnessResults | None:
        """The results saved in `folder`, None where there are none."""
        return read_saved(folder, RESULTS_JSON, cls.from_dict)
