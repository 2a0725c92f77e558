"""What `eval harness` measured, as types with their one JSON form (`results.json` of a harness folder, the layout
earlier versions wrote): the options and the noise scale, each model's lm-eval metrics per level, each arm's band and
the arms' comparisons. Metrics are named `task/metric,filter` (lm-eval's key after the task)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from ...noise import NoiseGrid
from ...utils.fields import known_keys
from ...utils.files import read_saved
from ...utils.types import JSONObject, JSONRead
from ..comparisons import Band, Comparison
from ..report.result_folder import ResultsFolder

HARNESS_JSON = "results.json"


@dataclass(frozen=True)
class HarnessFolder(ResultsFolder):
    """`eval harness`'s folder: results.json (`HarnessResults`), its plots and report.html."""

    RESULTS: ClassVar[str] = HARNESS_JSON


@dataclass(frozen=True)
class HarnessSettings:
    """The run's options as given (`HarnessArguments`' fields) and the noise scale sigma_x with where it came from."""

    tasks: list[str] | None
    gammas: NoiseGrid
    noise_seeds: int
    noise_mean: float
    sigma_x: float
    sigma_x_source: str
    limit: int | None
    num_fewshot: int | None
    batch_size: int
    max_gen_toks: int | None
    apply_chat_template: bool
    bootstrap_samples: int
    output_dir: str
    models: list[str] | None = None
    names: list[str] | None = None
    arm: list[str] | None = None
    reference: str | None = None
    include_path: str | None = None
    dtype: str = "auto"  # not recorded before it was an option: the default then and now

    def to_dict(self) -> JSONObject:
        return {**dataclasses.asdict(self), "gammas": self.gammas.to_list()}

    @classmethod
    def from_dict(cls, data: JSONRead) -> HarnessSettings:
        known_keys(cls, data, "harness settings")
        return cls(**{**data, "gammas": NoiseGrid(tuple(data["gammas"]))})


@dataclass
class HarnessResults:
    """Everything `eval harness` measured: `models[model][task][metric]` one value per level (every document and
    noise seed pooled), `bands[arm]['task/metric']` each arm's value and 95% interval per level, the comparisons of
    the arms (statistics `task/metric@gamma`), the seconds the cells took and the run's wall time."""

    settings: HarnessSettings
    versions: dict[str, str]
    arms: dict[str, list[str]]
    models: dict[str, dict[str, dict[str, list[float]]]]
    bands: dict[str, dict[str, Band]]
    comparisons: dict[str, Comparison]
    cell_seconds: float
    wall_seconds: float
    files: dict[str, str] = field(default_factory=dict)

    @property
    def metrics(self) -> list[str]:
        """Every `task/metric` with a band, sorted."""
        return sorted({key for bands in self.bands.values() for key in bands})

    def to_dict(self) -> JSONObject:
        out: JSONObject = {
            "settings": self.settings.to_dict(),
            "versions": self.versions,
            "arms": self.arms,
            "models": self.models,
            "bands": {arm: {k: vars(b) for k, b in bands.items()} for arm, bands in self.bands.items()},
            "comparisons": {name: c.to_dict() for name, c in self.comparisons.items()},
            "cell_seconds": self.cell_seconds,
            "wall_seconds": self.wall_seconds,
        }
        return {**out, "files": self.files} if self.files else out

    @classmethod
    def from_dict(cls, data: JSONRead) -> HarnessResults:
        known_keys(cls, data, "harness results")
        return cls(
            settings=HarnessSettings.from_dict(data["settings"]),
            versions=data["versions"],
            arms=data["arms"],
            models=data["models"],
            bands={arm: {k: Band(**b) for k, b in bands.items()} for arm, bands in data["bands"].items()},
            comparisons={name: Comparison.from_dict(name, rows) for name, rows in data["comparisons"].items()},
            cell_seconds=data["cell_seconds"],
            wall_seconds=data["wall_seconds"],
            files=data.get("files", {}),
        )

    @classmethod
    def load(cls, folder: str) -> HarnessResults | None:
        return read_saved(folder, HARNESS_JSON, cls.from_dict)
