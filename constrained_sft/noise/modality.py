"""
Noise by modality for vision-language models: the inputs the language model reads, text positions, image positions
or both.

Every VLM family transformers ships (LLaVA, LLaVA-Next, Gemma 3, PaliGemma, Mistral 3, Qwen2-VL to Qwen3-VL,
Idefics3 / SmolVLM) builds its language model's input the same way: the token embeddings of the ids, then the vision
tower's projected features scattered into the positions of the image placeholder token (`config.image_token_id`, and
`video_token_id`), then `language_model(inputs_embeds=...)`. Noise on the embedding table's output (the text hook of
`embedding`) never reaches an image position: the features overwrite it. So for a VLM the noise is added at the
language model's input instead (a forward pre-hook on `get_decoder()`), where both modalities are present:

- text positions: e ~ N(mu, (gamma sigma_x)^2), sigma_x the embedding table's (as for a text-only model), drawn
  from the same stream in the same shape as the text hook draws, so `modality="text"` perturbs exactly as before;
- image positions: e ~ N(mu, (gamma sigma_img)^2), sigma_img the std of the image features that reach the language
  model (every entry of the `[n_image_positions, D]` rows), measured on the starting model's first training batch by
  the trainers (`image_feature_sigma`), or on the first call with an image inside a block where none is given.

Which positions are images is read from the ids the outer model receives (`placeholder_ids`). gamma 0 leaves every
position exactly as it was. Text-only models keep the text hook; asking them for image noise is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ..utils.modules import unwrap_model
from ..utils.types import NOISE_MODALITIES as MODALITIES
from ..utils.types import Kwargs
from ..utils.types import NoiseModality as Modality
from .embedding import EmbeddingNoise, EmbeddingNoiseError

PLACEHOLDER_FIELDS = ("image_token_id", "image_token_index", "video_token_id", "video_token_index")


def placeholder_ids(model: nn.Module) -> tuple[int, ...]:
    """The token ids whose embeddings `model` replaces with vision features (empty for a text-only model)."""
    config = getattr(unwrap_model(model), "config", None)
    found: list[int] = []
    for name in PLACEHOLDER_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value not in found:
            found.append(value)
    return tuple(found)


def language_model(model: nn.Module) -> nn.Module | None:
    """The text decoder a VLM feeds its merged inputs (`get_decoder()`); None for a model without image tokens."""
    base = unwrap_model(model)
    if not placeholder_ids(base):
        return None
    get_decoder = getattr(base, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    return decoder if isinstance(decoder, nn.Module) and decoder is not base else None


def check_modality(modality: str, model: nn.Module) -> None:
    """`modality` one of `MODALITIES`, and `image` only for a model that reads images; else an EmbeddingNoiseError."""
    if modality not in MODALITIES:
        raise EmbeddingNoiseError(f"`noise_modality` must be one of {list(MODALITIES)}, got {modality!r}.")
    if modality == "image" and language_model(model) is None:
        raise EmbeddingNoiseError(
            f"`noise_modality` 'image' perturbs image features, but {type(unwrap_model(model)).__name__} reads no "
            "images; use 'text' (or 'both', the same for a text-only model)."
        )


def image_mask(ids: torch.Tensor | None, placeholders: tuple[int, ...], shape: torch.Size) -> torch.Tensor:
    """`[B, T]` True at image positions (ids among `placeholders`); all False where the ids are not known."""
    if ids is None or tuple(ids.shape) != tuple(shape):
        return torch.zeros(shape, dtype=torch.bool)
    return torch.isin(ids, torch.tensor(placeholders, device=ids.device))


class ModalityNoise(EmbeddingNoise):
    """The noise of one block on a VLM: text and image positions of the language model's input. Use
    [`embedding.noisy`], which builds it for a VLM."""

    def __init__(
        self,
        model: nn.Module,
        gamma: float | torch.Tensor,
        mean: float,
        generator: torch.Generator | None,
        sigma: float | None = None,
        modality: Modality = "both",
        image_sigma: float | None = None,
    ):
        super().__init__(model, gamma, mean, generator, sigma)
        check_modality(modality, model)
        decoder = language_model(model)
        if decoder is None:
            raise EmbeddingNoiseError(f"{type(self.model).__name__} is not a vision-language model.")
        self.decoder = decoder
        self.modality = modality
        self.placeholders = placeholder_ids(model)
        self.image_sigma = image_sigma  # measured on the first call with an image when not given
        self.ids: torch.Tensor | None = None  # [B, T] ids of the current call
        self.changed = torch.zeros(0, dtype=torch.bool)  # [B, T] positions the last call perturbed (tests count them)

    def _capture_call(self, module: nn.Module, args: tuple[Any, ...], kwargs: Kwargs) -> None:
        super()._capture_call(module, args, kwargs)
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.ids = ids if torch.is_tensor(ids) else None

    def _perturb_inputs(
        self, _module: nn.Module, args: tuple[Any, ...], kwargs: Kwargs
    ) -> tuple[tuple[Any, ...], Kwargs]:
        embeds = kwargs.get("inputs_embeds")
        if not torch.is_tensor(embeds):
            return args, kwargs
        g = self._per_position_gamma(embeds)  # [B, T, 1] or None
        if g is None:
            return args, kwargs
        images = image_mask(self.ids, self.placeholders, embeds.shape[:2]).to(embeds.device)  # [B, T]
        if self.image_sigma is None and bool(images.any()):
            self.image_sigma = checked_image_sigma(embeds.detach()[images].float())
        chosen = {"both": torch.ones_like(images), "text": ~images, "image": images}[self.modality]
        sigma = torch.where(images, self.image_sigma or 0.0, self.sigma)[..., None]  # [B, T, 1]
        eps = torch.randn(embeds.shape, generator=self.generator, device=embeds.device, dtype=torch.float32)
        keep = (g.gt(0) & chosen[..., None]).float()
        self.changed = (keep[..., 0] > 0).cpu()
        self.calls += 1
        noisy = embeds.float() + (self.mean + g * sigma * eps) * keep
        return args, {**kwargs, "inputs_embeds": noisy.to(embeds.dtype)}


@contextmanager
def hooked_inputs(noise: ModalityNoise) -> Iterator[None]:
    """The ids captured before every call of the model's backbone, the language model's `inputs_embeds` perturbed
    before every call of it, inside the block; removed on leaving it, even through an exception."""
    backbone = getattr(noise.model, "base_model", noise.model)
    handles = [
        backbone.register_forward_pre_hook(noise._capture_call, with_kwargs=True),
        noise.decoder.register_forward_pre_hook(noise._perturb_inputs, with_kwargs=True),
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class _Measured(Exception):
    """Raised inside the language model's pre-hook: the features are read, the rest of the forward is not needed."""


@torch.no_grad()
def image_feature_sigma(model: nn.Module, batch: Kwargs) -> float:
    """
    sigma_img: the population std of every entry of the image features `batch` puts before `model`'s language model
    (the `[n, D]` rows at its image positions), in float32. The language model itself is not run. An
    EmbeddingNoiseError where the batch holds no image.
    """
    decoder = language_model(model)
    placeholders = placeholder_ids(model)
    if decoder is None:
        raise EmbeddingNoiseError(f"{type(unwrap_model(model)).__name__} is not a vision-language model.")
    seen: list[torch.Tensor] = []

    def read(_module: nn.Module, _args: tuple[Any, ...], kwargs: Kwargs) -> None:
        embeds = kwargs["inputs_embeds"]
        mask = image_mask(batch.get("input_ids"), placeholders, embeds.shape[:2]).to(embeds.device)
        seen.append(embeds[mask].float())
        raise _Measured

    handle = decoder.register_forward_pre_hook(read, with_kwargs=True)
    try:
        unwrap_model(model)(**{k: v for k, v in batch.items() if k != "labels"})
    except _Measured:
        pass
    finally:
        handle.remove()
    rows = seen[0] if seen else torch.zeros(0)
    if not rows.numel():
        raise EmbeddingNoiseError(
            "image noise needs images: the batch it is measured on (the start of the training data) has no image "
            "position; give rows with images, or set `noise_modality: text`."
        )
    return checked_image_sigma(rows)


def checked_image_sigma(rows: torch.Tensor) -> float:
    """The population std of image-feature rows `[n, D]`; an EmbeddingNoiseError where it is 0 (or not finite): the
    model's projector gives every image the same features, so a noise scale relative to them would be 0."""
    std = float(rows.std(unbiased=False))
    if not std > 0 or std == float("inf"):
        raise EmbeddingNoiseError(
            f"the image features this model gives have std {std}: image noise would be 0 x gamma. Set "
            "`noise_image_sigma` to the scale to perturb them at, or `noise_modality: text`."
        )
    return std
