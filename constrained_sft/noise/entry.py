"""
The one entry point of the library's noise: `noisy` (and `embedding_noise`, its form for users) perturbs a model's
inputs inside a block, with the text hook of `embedding` for a text-only model (or a denoiser's pixels) and the
language-model-input hook of `modality` for a vision-language model.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ..utils.types import NoiseModality
from .embedding import EmbeddingNoise, hooked, noise_stream
from .modality import ModalityNoise, check_modality, hooked_inputs, language_model


@contextmanager
def noisy(
    model: nn.Module,
    gamma: float | torch.Tensor,
    generator: torch.Generator | None,
    mean: float = 0.0,
    sigma: float | None = None,
    modality: NoiseModality = "both",
    image_sigma: float | None = None,
) -> Iterator[EmbeddingNoise]:
    """
    The one entry point of the library's noise: `model`'s token embeddings perturbed inside the block, in train and
    eval mode and in `generate()`, every draw from `generator` (one convention: a seed becomes a stream through
    `noise_stream`; None: torch's global stream). `gamma` is a float or a `[B]` tensor of per-example levels; `sigma`
    fixes sigma_x (default: the model's own, as its weights are now). Padding positions (attention mask 0) are never
    perturbed. Leaving the block, even through an exception, removes the hooks and restores the exact clean model.
    A vision-language model is perturbed at its language model's input instead, by `modality` (text positions,
    image positions or both, `image_sigma` the image features' scale: see `noise.modality`); a text-only model has
    text positions only ('image' is refused).
    """
    check_modality(modality, model)
    if language_model(model) is not None:
        vlm = ModalityNoise(model, gamma, mean, generator, sigma, modality, image_sigma)
        with hooked_inputs(vlm):
            yield vlm
        return
    noise = EmbeddingNoise(model, gamma, mean, generator, sigma)
    with hooked(noise.model, noise.module, noise._capture_call, noise._perturb):
        yield noise


@contextmanager
def embedding_noise(
    model: nn.Module,
    gamma: float | torch.Tensor = 0.0,
    mean: float = 0.0,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    sigma: float | None = None,
    modality: NoiseModality = "both",
    image_sigma: float | None = None,
) -> Iterator[EmbeddingNoise]:
    """
    `noisy` for users, with a seed or a stream: perturb `model`'s token embeddings inside the block.

        with embedding_noise(model, gamma=1.5, seed=0):
            model.generate(**inputs)

    `seed` is `noise_stream(model, seed)`; an explicit `generator` is used as given. See [`noisy`].
    """
    if generator is None and seed is not None:
        generator = noise_stream(model, seed)
    with noisy(model, gamma, generator, mean, sigma, modality, image_sigma) as noise:
        yield noise
