"""`eval exits`' options (`constrained-sft eval exits --help`), checked before any model loads."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...comparison.arm_arguments import check_model_paths, folder_name
from ...data import ModelSpec
from ...noise import NoiseGrid
from ...tasks.sft import causal_lm_config
from ...utils.fields import check_fields
from ...utils.output_folders import check_output_folder, plain_name
from ..instructions import ALPACA_EVAL, GenerationError


@dataclass
class ExitsArguments:
    models: list[str] | None = field(
        default=None, metadata={"help": "Causal LM folders, Hub ids, `pkg:` aliases or LoRA adapter folders."}
    )
    names: list[str] | None = field(default=None, metadata={"help": "A name per model (default: folder names)."})
    base_model: str | None = field(default=None, metadata={"help": "Base model of an adapter that does not name one."})
    output_dir: str | None = field(default=None, metadata={"help": "Where exits.json, the plot and report.html go."})
    exit_layers: list[int] | None = field(
        default=None,
        metadata={"help": "Layers l whose readout drafts (1 <= l < L; default: L/4, L/2 and 3L/4, rounded)."},
    )
    instructions: str = field(
        default=ALPACA_EVAL,
        metadata={"help": "`tatsu-lab/alpaca_eval` (Hub) or a local .json/.jsonl file with an `instruction` field."},
    )
    max_instances: int = field(default=16, metadata={"help": "Prompts decoded (the units the interval resamples)."})
    max_new_tokens: int = field(default=64, metadata={"help": "New tokens per prompt."})
    system_prompt: str | None = field(default=None, metadata={"help": "A system message before each instruction."})
    gammas: list[float] = field(
        default_factory=lambda: [0.0],
        metadata={"help": "Noise levels of the per-layer view (needs reference answers in --instructions)."},
    )
    sigma_x: float | None = field(
        default=None,
        metadata={
            "help": "sigma_x of that noise (default: the first model's recorded `noise_sigma_x`, else measured)."
        },
    )
    bootstrap_samples: int = field(default=2000, metadata={"help": "Bootstrap resamples of the prompts."})
    bf16: bool | None = field(default=None, metadata={"help": "bf16 weights (default: on CUDA devices with bf16)."})
    compile: bool = field(
        default=False,
        metadata={
            "help": "Compiled decoding, plain and drafted alike: a static KV cache and torch.compile'd steps "
            "(transformers'; every way warmed up once, untimed). Greedy tokens are unchanged."
        },
    )

    def __post_init__(self) -> None:
        check_fields(self)
        check_output_folder(self.output_dir, "--output_dir")

    def validate(self) -> tuple[list[str], str]:
        """Everything checkable before a model loads; errors name the field. Returns (`--models`, `--output_dir`),
        which have no default."""
        if not self.models or not self.output_dir:
            raise GenerationError("`--models` and `--output_dir` are required.")
        if self.names is not None and (len(self.names) != len(self.models) or len(set(self.names)) != len(self.names)):
            raise GenerationError(f"`--names` must give one distinct name per model of --models, got {self.names}.")
        for name in self.names or []:
            plain_name(name, "--names", GenerationError)
        if len(set(self.model_names())) != len(self.models):
            raise GenerationError(
                f"the models' folder names {self.model_names()} repeat; pass `--names` (one distinct name per model)."
            )
        for name in ("max_instances", "max_new_tokens", "bootstrap_samples"):
            if getattr(self, name) < 1:
                raise GenerationError(f"`--{name}` must be an integer >= 1, got {getattr(self, name)}.")
        if self.exit_layers is not None and (not self.exit_layers or min(self.exit_layers) < 1):
            raise GenerationError(f"`--exit_layers` must be layers >= 1, got {self.exit_layers}.")
        NoiseGrid.parse(self.gammas)
        if self.sigma_x is not None and not (math.isfinite(self.sigma_x) and self.sigma_x > 0):
            raise GenerationError(f"`--sigma_x` must be a finite number > 0, got {self.sigma_x}.")
        check_model_paths(self.models, "--models")  # after the options: every model, before any loads
        return self.models, self.output_dir

    def model_names(self) -> list[str]:
        return self.names or [folder_name(p) for p in self.models or []]


def default_exits(num_layers: int) -> list[int]:
    """L/4, L/2 and 3L/4, rounded, distinct, in 1..L-1."""
    return sorted({min(max(round(num_layers * q), 1), num_layers - 1) for q in (0.25, 0.5, 0.75)})


def check_depths(args: ExitsArguments, specs: list[ModelSpec]) -> None:
    """Every model is a causal LM deep enough for the exit layers, checked from its config before any decodes."""
    for spec in specs:
        config = causal_lm_config(spec)
        if config is None:
            continue  # not readable without loading (a Hub id offline): checked once loaded
        L = config.num_hidden_layers
        if bad := [x for x in args.exit_layers or default_exits(L) if not 1 <= x < L]:
            raise GenerationError(f"`--exit_layers` {bad} are outside 1..{L - 1} for {spec.name} ({L} layers).")
