"""`eval robustness`'s arguments: the models (by arm), the held-out data's recipe, the level grid, the noise seeds and
how the comparisons are drawn; every field checked before any work."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...comparison.arm_arguments import ArmArguments
from ...noise import NoiseGrid
from ...tasks import TASKS
from ...utils.fields import check_fields
from ...utils.output_folders import check_output_folder
from ...utils.types import NOISE_MODALITIES, NoiseModality
from ..loading import layer_indices


@dataclass
class RobustnessArguments(ArmArguments):
    task: str | None = field(
        default=None,
        metadata={
            "help": "The models' task: 'sft' (causal LMs, the default), 'classification' or 'video' (denoisers: RMSE "
            "instead of accuracy); a recipe's `task` sets it.",
            "choices": list(TASKS),
        },
    )
    output_dir: str | None = field(
        default=None, metadata={"help": "Where results.json, results.csv, the plots and report.html go."}
    )
    base_model: str | None = field(default=None, metadata={"help": "Base model of adapters that do not name one."})
    recipe: str | None = field(
        default=None, metadata={"help": "A training recipe whose data fields define the held-out set."}
    )
    gammas: list[float] | None = field(
        default=None,
        metadata={"help": "Test noise levels (default: 0 to 4x the training level in 5 steps; 0..2 without one)."},
    )
    train_gamma: float | None = field(
        default=None,
        metadata={
            "help": "Training noise level, the ID / OOD boundary (default: from the first model's constraints.json, "
            "else the recipe)."
        },
    )
    seeds: int = field(default=3, metadata={"help": "Noise seeds per level; results are mean and std over them."})
    noise_mean: float = field(default=0.0, metadata={"help": "Mean of the noise."})
    sigma_x: float | None = field(
        default=None,
        metadata={
            "help": "sigma_x for every model compared (default: `noise_sigma_x` in the first model's constraints.json, "
            "the starting model's scale its training used; else measured on the first model)."
        },
    )
    noise_modality: NoiseModality = field(
        default="both",
        metadata={
            "help": "Which inputs of a vision-language model the noise perturbs: 'text' (token embeddings), 'image' "
            "(the image features its language model reads) or 'both'; a text-only model reads text alone.",
            "choices": list(NOISE_MODALITIES),
        },
    )
    image_sigma: float | None = field(
        default=None,
        metadata={
            "help": "A VLM's image-feature scale for every model compared (default: `noise_image_sigma_x` in the "
            "first model's constraints.json, else measured on the first model's first held-out batch)."
        },
    )
    layers: str = field(
        default="trained",
        metadata={
            "help": "'trained' (the layers in the model's constraints.json, else all), 'all', or comma-separated indices."
        },
    )
    curve_gammas: list[float] | None = field(
        default=None,
        metadata={"help": "Levels of the layer-curve plot and frame strip (default: 0, the training level, the top)."},
    )
    batch_size: int = field(default=8, metadata={"help": "Evaluation batch size."})
    max_length: int = field(
        default=1024,
        metadata={"help": "Truncate sequences to this many tokens (default: the recipe's max_length, else 1024)."},
    )
    bf16: bool | None = field(
        default=None, metadata={"help": "bf16 weights and autocast (default: on CUDA devices that support it)."}
    )
    bootstrap_samples: int = field(default=2000, metadata={"help": "Paired-bootstrap resamples per interval."})

    def __post_init__(self) -> None:
        check_fields(self)
        check_output_folder(self.output_dir, "--output_dir")

    def validate(self, arms: dict[str, list[tuple[str, str]]] | None = None) -> str:
        """Every field checked before any work; `arms`: models given by the caller instead of --models / --arm.
        Returns `--output_dir`, which has no default."""
        self.validate_selection(arms)
        if not self.output_dir:
            raise ValueError("`--output_dir` is required.")
        for name in ("gammas", "curve_gammas"):
            if getattr(self, name) is not None:
                NoiseGrid.parse(getattr(self, name), f"--{name}")
        if self.train_gamma is not None and (not np.isfinite(self.train_gamma) or self.train_gamma < 0):
            raise ValueError(f"`--train_gamma` must be finite and >= 0, got {self.train_gamma}.")
        for name in ("sigma_x", "image_sigma"):
            value = getattr(self, name)
            if value is not None and not (np.isfinite(value) and value > 0):
                raise ValueError(f"`--{name}` must be a finite number > 0, got {value}.")
        for name in ("seeds", "batch_size", "bootstrap_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"`--{name}` must be >= 1, got {getattr(self, name)}.")
        if self.layers not in ("trained", "all"):
            layer_indices(self.layers)
        self.check_paths(self.arms() if arms is None else arms)
        return self.output_dir
