"""
The video denoisers by name: the registry `DENOISERS` owns each architecture's name (a `task: video` recipe's
`architecture`), its model class, the axis its patch sequences run along, the recipe fields it reads, how it is built
from them and what it refuses. A new denoiser is one entry here; nothing above branches on the names.

A recipe is read duck-typed (any object with the fields named in `fields`, plus `patch_size`, `frame_size` and
`num_layers`), so this module needs nothing from the task layer above it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from transformers import PreTrainedModel

from .dust import DUSTConfig, DUSTForDenoising
from .video_ut import VideoUTConfig, VideoUTForDenoising
from .vit_denoiser import ViTDenoiserConfig, ViTForDenoising


@dataclass(frozen=True)
class Denoiser:
    """One denoiser architecture: `build(recipe, sigma_x)` returns the model, its noise scale saved in its config;
    `problem(recipe)` says what is wrong with the recipe's fields for it (None: nothing)."""

    name: str
    description: str
    model_class: type[PreTrainedModel]
    sequence_axis: str  # 'time': a patch position over the clip's frames; 'space': the patches of one frame (B.2)
    fields: tuple[str, ...]  # the recipe fields it reads beyond `patch_size`, `frame_size` and `num_layers`
    build: Callable[[Any, float], PreTrainedModel]
    problem: Callable[[Any], str | None] = lambda recipe: None


def _dust(recipe: Any, sigma_x: float) -> DUSTForDenoising:
    config = DUSTConfig(
        patch_size=recipe.patch_size,
        dictionary_atoms_per_side=recipe.dictionary_atoms_per_side or 20,
        num_hidden_layers=recipe.num_layers,
        sparsity_weight=recipe.sparsity_weight,
        attention_weight=recipe.attention_weight,
        tie_dictionaries=recipe.tie_dictionaries,
        data_std=sigma_x,
        architectures=[DUSTForDenoising.__name__],
    )
    return DUSTForDenoising(config)


def _ut(recipe: Any, sigma_x: float) -> VideoUTForDenoising:
    config = VideoUTConfig(
        patch_size=recipe.patch_size,
        dictionary_atoms_per_side=recipe.dictionary_atoms_per_side or 16,
        num_hidden_layers=recipe.num_layers,
        data_std=sigma_x,
        architectures=[VideoUTForDenoising.__name__],
    )
    return VideoUTForDenoising(config)


def _vit(recipe: Any, sigma_x: float) -> ViTForDenoising:
    frame = dict(frame_size=recipe.frame_size, data_std=sigma_x)
    if recipe.vit_model_name_or_path:
        return ViTForDenoising.from_pretrained_vit(recipe.vit_model_name_or_path, **frame)
    config = ViTDenoiserConfig(
        hidden_size=recipe.vit_hidden_size,
        num_attention_heads=recipe.vit_hidden_size // 64,
        intermediate_size=recipe.vit_intermediate_size,
        num_hidden_layers=recipe.num_layers,
        image_size=recipe.frame_size,
        patch_size=recipe.patch_size,
        num_channels=1,
        architectures=[ViTForDenoising.__name__],
        **frame,
    )
    return ViTForDenoising(config)


def _vit_problem(recipe: Any) -> str | None:
    if recipe.vit_model_name_or_path is None and recipe.vit_hidden_size % 64:
        return f"`vit_hidden_size` must be a multiple of 64 (heads of 64), got {recipe.vit_hidden_size}."
    return None


# A fixed table, read-only (`MappingProxyType`): its entries are records (values), not classes a plug-in registers, so
# `utils.registry.Registry`, which checks classes, is not theirs; another one is another row here.
DENOISERS: Mapping[str, Denoiser] = MappingProxyType(
    {
        d.name: d
        for d in (
            Denoiser(
                "dust",
                "De Weerdt et al. 2023: symmetric attention + LISTA on DCT dictionaries",
                DUSTForDenoising,
                "time",
                ("dictionary_atoms_per_side", "sparsity_weight", "attention_weight", "tie_dictionaries"),
                _dust,
            ),
            Denoiser(
                "ut",
                "Yang et al. 2022: the unrolled transformer, on patch sequences",
                VideoUTForDenoising,
                "time",
                ("dictionary_atoms_per_side",),
                _ut,
            ),
            Denoiser(
                "vit",
                "a ViTModel with a shared linear un-patching readout",
                ViTForDenoising,
                "space",
                ("vit_model_name_or_path", "vit_hidden_size", "vit_intermediate_size"),
                _vit,
                _vit_problem,
            ),
        )
    }
)


def denoiser_of(model: Any) -> Denoiser:
    """The registry entry of a built or loaded denoiser (by its class)."""
    for entry in DENOISERS.values():
        if isinstance(model, entry.model_class):
            return entry
    raise ValueError(
        f"{type(model).__name__} is not a registered video denoiser (one of "
        f"{', '.join(d.model_class.__name__ for d in DENOISERS.values())})."
    )


def architecture_help() -> str:
    """The recipe field's help: each name, what it is and the fields it reads."""
    return "; ".join(f"'{d.name}' ({d.description}; reads {', '.join(d.fields)})" for d in DENOISERS.values()) + "."
