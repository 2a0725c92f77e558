"""What `eval exits` measured, as types with their one JSON form (`exits.json`, the layout earlier versions wrote):
per model, each exit layer's self-speculative decoding (`ExitSpeedup`), the raw per-prompt measurements the
intervals resample (`PromptMeasurements`) and, with reference answers, each layer's own readout of them at every
noise level (`LayerReadout`). JSON keys are strings (`"9"`, `"1.0"`); the types key layers by int, levels by float."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from ...utils.fields import known_keys
from ...utils.files import read_saved
from ...utils.types import JSONObject, JSONRead
from ..report.result_folder import ResultsFolder

EXITS_JSON = "exits.json"


@dataclass(frozen=True)
class ExitsFolder(ResultsFolder):
    """`eval exits`'s folder: exits.json (`ExitsResults`), its plots and report.html."""

    RESULTS: ClassVar[str] = EXITS_JSON


@dataclass(frozen=True)
class ExitSpeedup:
    """One exit layer of one model: the speed-up over plain greedy decoding (pooled over prompts) with its 95%
    interval over prompts, tokens per second, the drafts' acceptance rate, tokens per full-model forward (NaN where
    nothing was drafted or verified), and whether every prompt decoded exactly as plain greedy decoding."""

    speedup: float
    speedup_low: float
    speedup_high: float
    tokens_per_second: float
    acceptance_rate: float
    tokens_per_verify: float
    identical_to_greedy: bool

    @classmethod
    def from_dict(cls, data: JSONRead) -> ExitSpeedup:
        return cls(**known_keys(cls, data, "exit layer"))


@dataclass(frozen=True)
class PromptMeasurements:
    """Per prompt: plain greedy seconds and new tokens; per exit layer, each prompt's drafted seconds, drafting and
    verifying forwards and whether its tokens equal greedy decoding's (lists of one entry per prompt)."""

    plain_seconds: list[float]
    tokens: list[int]
    exits: dict[int, dict[str, list]]  # layer -> {"seconds", "drafted", "verified", "identical"}

    def to_dict(self) -> JSONObject:
        return {
            "plain_seconds": self.plain_seconds,
            "tokens": self.tokens,
            "exits": {str(k): v for k, v in self.exits.items()},
        }

    @classmethod
    def from_dict(cls, data: JSONRead) -> PromptMeasurements:
        known_keys(cls, data, "per-prompt measurements")
        return cls(data["plain_seconds"], data["tokens"], {int(k): v for k, v in data["exits"].items()})


@dataclass(frozen=True)
class LayerReadout:
    """Each layer's readout of the reference answers at one noise level, teacher-forced: mean NLL and top-1 share of
    the answer tokens, layers 1..L."""

    loss: dict[int, float]
    accuracy: dict[int, float]

    def to_dict(self) -> JSONObject:
        return {what: {str(k): v for k, v in getattr(self, what).items()} for what in ("loss", "accuracy")}

    @classmethod
    def from_dict(cls, data: JSONRead) -> LayerReadout:
        known_keys(cls, data, "layer readout")
        return cls(*(dict(sorted((int(k), v) for k, v in data[what].items())) for what in ("loss", "accuracy")))


@dataclass(frozen=True)
class ExitsModel:
    """One model: its L layers, plain greedy speed, each exit layer's decoding, the per-prompt measurements and (with
    reference answers) each noise level's layer readout."""

    path: str
    num_layers: int
    plain_tokens_per_second: float
    exits: dict[int, ExitSpeedup]
    per_prompt: PromptMeasurements
    layers: dict[float, LayerReadout] | None = None

    def to_dict(self) -> JSONObject:
        out: JSONObject = {
            "path": self.path,
            "num_layers": self.num_layers,
            "plain_tokens_per_second": self.plain_tokens_per_second,
            "exits": {str(k): dataclasses.asdict(v) for k, v in self.exits.items()},
            "per_prompt": self.per_prompt.to_dict(),
        }
        if self.layers is not None:
            out["layers"] = {str(gamma): view.to_dict() for gamma, view in self.layers.items()}
        return out

    @classmethod
    def from_dict(cls, data: JSONRead) -> ExitsModel:
        known_keys(cls, data, "exits model")
        layers = data.get("layers")
        return cls(
            path=data["path"],
            num_layers=data["num_layers"],
            plain_tokens_per_second=data["plain_tokens_per_second"],
            exits={
                int(k): ExitSpeedup.from_dict(v) for k, v in sorted(data["exits"].items(), key=lambda kv: int(kv[0]))
            },
            per_prompt=PromptMeasurements.from_dict(data["per_prompt"]),
            layers=None if layers is None else {float(g): LayerReadout.from_dict(v) for g, v in layers.items()},
        )


@dataclass(frozen=True)
class ExitsSettings:
    """The run's options as given (`ExitsArguments`' fields), the prompts decoded, the noise levels of the layer view
    and the sigma_x they used, and the description every report prints."""

    models: list[str]
    names: list[str] | None
    base_model: str | None
    output_dir: str
    exit_layers: list[int] | None
    instructions: str
    max_instances: int
    max_new_tokens: int
    system_prompt: str | None
    gammas: list[float]
    sigma_x: float | None
    bootstrap_samples: int
    bf16: bool | None
    n_prompts: int
    description: str
    compile: bool = False  # written since issue 83: earlier exits.json files decoded eagerly

    @classmethod
    def from_dict(cls, data: JSONRead) -> ExitsSettings:
        return cls(**known_keys(cls, data, "exits settings"))


@dataclass
class ExitsResults:
    """Everything `eval exits` measured (`exits.json`): settings, package versions, each model, the files written."""

    settings: ExitsSettings
    versions: dict[str, str]
    models: dict[str, ExitsModel]
    files: dict[str, str] = field(default_factory=dict)

    @property
    def has_layer_view(self) -> bool:
        return bool(self.layer_views())

    def layer_views(self) -> dict[str, dict[float, LayerReadout]]:
        """Each model's per-layer readout by noise level, by model name; empty unless every model has one (the
        instructions held reference answers)."""
        views = {name: m.layers for name, m in self.models.items() if m.layers is not None}
        return views if len(views) == len(self.models) else {}

    def to_dict(self) -> JSONObject:
        return {
            "settings": dataclasses.asdict(self.settings),
            "versions": self.versions,
            "models": {name: m.to_dict() for name, m in self.models.items()},
            "files": self.files,
        }

    @classmethod
    def from_dict(cls, data: JSONRead) -> ExitsResults:
        known_keys(cls, data, "exits results")
        return cls(
            settings=ExitsSettings.from_dict(data["settings"]),
            versions=data["versions"],
            models={name: ExitsModel.from_dict(m) for name, m in data["models"].items()},
            files=data.get("files", {}),
        )

    @classmethod
    def load(cls, folder: str) -> ExitsResults | None:
        """The results `eval exits` saved in `folder`, None where there are none."""
        return read_saved(folder, EXITS_JSON, cls.from_dict)
