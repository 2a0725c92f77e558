"""
`constrained-sft train` for `task: video` recipes: a video denoiser (DUST, UT or ViT; paper Section 4) trained with
`ConstrainedTrainer` on clean clips whose pixels are perturbed at its input.

    constrained-sft train --config recipes/dust/skvideo/constrained.yaml

YAML keys are exactly the fields of `VideoScriptArguments` (with the data fields of `VideoDataArguments`) and
`ConstrainedConfig`. sigma_x, the noise scale, is the std of the clean training pixels: measured on the training
videos, saved in the model's config (`data_std`) and recorded in constraints.json.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from transformers import default_data_collator
from trl import TrlParser

from ..config import ConstrainedConfig
from ..data.video import VideoDataArguments, VideoDataError, load_video
from ..evaluation.video import GREY  # RMSE on the 0-255 scale of the paper's tables
from ..models import (
    DENOISERS,
    DUSTConfig,
    DUSTForDenoising,
    VideoUTConfig,
    VideoUTForDenoising,
    ViTDenoiserConfig,
    ViTForDenoising,
)
from ..trainers import ConstrainedTrainer
from ..utils import write_json
from .common import parse, train_and_report


@dataclass
class VideoScriptArguments(VideoDataArguments):
    task: str = field(default="video", metadata={"help": "'video' (this recipe kind).", "choices": ["video"]})
    architecture: str = field(
        default="dust",
        metadata={
            "help": "'dust' (De Weerdt et al. 2023), 'ut' (Yang et al. 2022, on patch sequences) or 'vit' (a "
            "ViTModel with a shared linear un-patching readout).",
            "choices": list(DENOISERS),
        },
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
        if not isinstance(self.num_layers, int) or self.num_layers < 1:
            raise VideoDataError(f"`num_layers` must be an integer >= 1, got {self.num_layers!r}.")
        if self.architecture == "vit" and self.vit_hidden_size % 64 and self.vit_model_name_or_path is None:
            raise VideoDataError(
                f"`vit_hidden_size` must be a multiple of 64 (heads of 64), got {self.vit_hidden_size}."
            )

    @property
    def sequence_axis(self) -> str:
        """DUST and UT read a patch position over time; the ViT reads one frame (B.2)."""
        return "space" if self.architecture == "vit" else "time"


def build_denoiser(args: VideoScriptArguments, sigma_x: float):
    """The recipe's denoiser, its noise scale sigma_x saved in its config."""
    if args.architecture == "dust":
        config = DUSTConfig(
            patch_size=args.patch_size,
            dictionary_atoms_per_side=args.dictionary_atoms_per_side or 20,
            num_hidden_layers=args.num_layers,
            sparsity_weight=args.sparsity_weight,
            attention_weight=args.attention_weight,
            tie_dictionaries=args.tie_dictionaries,
            data_std=sigma_x,
            architectures=[DUSTForDenoising.__name__],
        )
        return DUSTForDenoising(config)
    if args.architecture == "ut":
        config = VideoUTConfig(
            patch_size=args.patch_size,
            dictionary_atoms_per_side=args.dictionary_atoms_per_side or 16,
            num_hidden_layers=args.num_layers,
            data_std=sigma_x,
            architectures=[VideoUTForDenoising.__name__],
        )
        return VideoUTForDenoising(config)
    frame = dict(frame_size=args.frame_size, data_std=sigma_x)
    if args.vit_model_name_or_path:
        return ViTForDenoising.from_pretrained_vit(args.vit_model_name_or_path, **frame)
    config = ViTDenoiserConfig(
        hidden_size=args.vit_hidden_size,
        num_attention_heads=args.vit_hidden_size // 64,
        intermediate_size=args.vit_intermediate_size,
        num_hidden_layers=args.num_layers,
        image_size=args.frame_size,
        patch_size=args.patch_size,
        num_channels=1,
        architectures=[ViTForDenoising.__name__],
        **frame,
    )
    return ViTForDenoising(config)


def make_parser() -> TrlParser:
    return TrlParser((VideoScriptArguments, ConstrainedConfig))


def run(script_args: VideoScriptArguments, training_args: ConstrainedConfig) -> dict:
    splits = load_video(script_args, script_args.sequence_axis)
    model = build_denoiser(script_args, splits.sigma_x)
    trainer = ConstrainedTrainer(
        model=model,
        args=training_args,
        train_dataset=splits.train,
        eval_dataset=splits.test,
        data_collator=default_data_collator,
        loss="squared_error",
    )
    if trainer.is_world_process_zero():
        os.makedirs(training_args.output_dir, exist_ok=True)
        write_json(
            os.path.join(training_args.output_dir, "video_data.json"), {**splits.summary, "sigma_x": splits.sigma_x}
        )
    results = train_and_report(trainer, script_args.evaluate_before_training, accuracy_key=None)
    loss = results["after"].get("eval_loss")
    if loss is not None and trainer.is_world_process_zero():
        print(f"held-out RMSE (grey levels 0-255, clean test input): {math.sqrt(loss) * GREY:.2f}")
    return results


def main(argv: list[str] | None = None) -> int:
    script_args, training_args = parse(make_parser(), argv)
    run(script_args, training_args)
    return 0
