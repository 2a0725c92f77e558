"""
Gaussian perturbation of token embeddings: one hook for training, evaluation and generation.

Noise model: e ~ N(mu, (gamma * sigma_x)^2 I) is added to the output of the model's input embedding module at every
real (non-padding) token position, on every forward call, including each decoding step of `generate()`.

sigma_x is the standard deviation of the model's clean token embeddings over the whole vocabulary: the std of all
V x D entries of the input embedding matrix, times the scale the embedding module applies to its output (e.g.
Gemma's sqrt(D)). It is a property of the model, not of the batch, so training, evaluation and generation (where a
step embeds one token) all use the same value. Video denoisers perturb their pixel inputs instead: their input module
(`models.denoising.PixelInput`) has no table and carries sigma_x, the std of the clean training frames. Comparisons fix it: the trainers measure it once on the starting
model and keep it (`noise_sigma`, recorded in constraints.json), and the evaluation commands use one value for every
model they compare, so that twins whose training moved their embeddings differently are perturbed alike. Without a
given `sigma`, `embedding_noise` measures the model as it is when the block is entered, in [rows, D] chunks
(no fp32 copy of the table).

An example whose gamma is 0 is left exactly as it was (no mean shift either): `gamma=0` is a bit-exact no-op.
Shapes: B rows of T tokens, hidden size D.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ..utils.modules import unwrap_model, zero3_gathered
from ..utils.types import Kwargs


class EmbeddingNoiseError(ValueError):
    pass


def input_embedding_module(model: nn.Module) -> nn.Module:
    """The module whose output are the token embeddings, for plain, PEFT-wrapped and distributed models."""
    base = unwrap_model(model)
    getter = getattr(base, "get_input_embeddings", None)
    module = getter() if callable(getter) else None
    if isinstance(module, nn.Module) and getattr(module, "sigma", None) is not None:
        return module  # pixel inputs (video denoisers): no table, sigma_x is the data's, carried by the module
    if not isinstance(module, nn.Module) or not isinstance(getattr(module, "weight", None), torch.Tensor):
        raise EmbeddingNoiseError(
            f"{type(base).__name__} has no input embedding module (`get_input_embeddings()` returned {module!r}); "
            "embedding noise needs a model whose token embeddings come from such a module."
        )
    return module


CHUNK_ELEMENTS = 1 << 22  # 16 MiB of float32 per chunk


def table_std(weight: torch.Tensor) -> float:
    """Population std of every entry of `weight` `[V, D]`: two passes over row chunks in float32, summed in float64."""
    rows = weight.detach().reshape(-1, weight.shape[-1])
    chunks = torch.split(rows, max(1, CHUNK_ELEMENTS // rows.size(1)))
    n = rows.numel()
    zero = torch.zeros((), dtype=torch.float64, device=rows.device)  # sum's start, so the sums are typed as tensors
    mean = sum((c.float().sum(dtype=torch.float64) for c in chunks), zero) / n
    return float(
        (sum(((c.float() - mean.float()).square().sum(dtype=torch.float64) for c in chunks), zero) / n).sqrt()
    )


def module_sigma(module: nn.Module) -> float:
    """
    sigma_x of an embedding module as its weights are now, measured on every call: an optimizer step can change the
    table without bumping the weight's version counter (fused AdamW does not), so no cache could tell. Under ZeRO-3
    the gather is a collective: every rank must call it. A module without a table carries its sigma_x (`sigma`).
    """
    if (sigma := getattr(module, "sigma", None)) is not None:
        return float(sigma)
    weight = module.weight
    if not isinstance(weight, torch.Tensor):
        raise EmbeddingNoiseError(f"{type(module).__name__} has no embedding table (`weight`) to measure sigma_x on.")
    with torch.no_grad(), zero3_gathered(weight):
        full = getattr(weight, "full_tensor", None)  # FSDP2 shards: a DTensor
        std = table_std(full() if callable(full) else weight)
    scale = getattr(module, "embed_scale", 1.0)
    return std * abs(float(scale.item()) if torch.is_tensor(scale) else float(scale))


def embedding_sigma(model: nn.Module) -> float:
    """sigma_x of `model` as it is now (see the module docstring)."""
    return module_sigma(input_embedding_module(model))


def check_gamma(gamma: float | torch.Tensor) -> None:
    """A level (or `[B]` levels) of noise: finite and >= 0, else an `EmbeddingNoiseError`."""
    values = gamma if torch.is_tensor(gamma) else torch.tensor([float(gamma)])
    if not bool(torch.isfinite(values).all()) or bool((values < 0).any()):
        raise EmbeddingNoiseError(f"`gamma` must be finite and >= 0, got {gamma!r}.")


def check_sigma(sigma: float | None) -> None:
    """A given sigma_x: a finite number > 0 (None: measured on the model), else an `EmbeddingNoiseError`."""
    if sigma is not None and not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise EmbeddingNoiseError(f"`sigma` must be a finite number > 0 (or None to measure it), got {sigma!r}.")


class EmbeddingNoise:
    """
    The state of one noise hook: level(s), mean, random stream and the padding mask of the current call. Use
    [`embedding_noise`] rather than this class directly.
    """

    def __init__(
        self,
        model: nn.Module,
        gamma: float | torch.Tensor,
        mean: float,
        generator: torch.Generator | None,
        sigma: float | None = None,
    ):
        check_gamma(gamma)
        check_sigma(sigma)
        self.model = unwrap_model(model)
        self.module = input_embedding_module(model)
        # measured on entering the block, on every rank alike (a collective under ZeRO-3), never in the forward
        self.sigma = float(sigma) if sigma is not None else module_sigma(self.module)
        self.gamma = gamma
        self.mean = float(mean)
        self.generator = generator
        self.mask: torch.Tensor | None = None  # [B, T_total] attention mask of the current model call
        self.segments: torch.Tensor | None = None  # [B, T] document ids (padding-free rows)
        self.calls = 0  # forward calls that were perturbed (tests count generation steps with it)

    def _capture_call(self, _module: nn.Module, args: tuple[Any, ...], kwargs: Kwargs) -> None:
        mask = kwargs.get("attention_mask")
        # a [B, T_total] padding mask; a static cache's decoding steps pass a [B, 1, T, L] attention mask instead,
        # whose columns are cache slots, not these tokens: left out (every token of a decoding step is real)
        self.mask = mask if torch.is_tensor(mask) and mask.dim() == 2 else None
        position_ids = kwargs.get("position_ids")
        self.segments = None
        if self.mask is None and position_ids is not None and position_ids.dim() == 2:
            starts = position_ids.eq(0)
            starts[:, 0] = True
            self.segments = starts.long().cumsum(1).sub(1)  # [B, T] document index within each row

    def _per_position_gamma(self, embeds: torch.Tensor) -> torch.Tensor | None:
        """gamma as a `[B, T, 1]` tensor, or None when nothing is perturbed."""
        B, T = embeds.shape[:2]
        gamma = self.gamma
        if not torch.is_tensor(gamma):
            if gamma == 0:
                return None
            g = embeds.new_full((B, T), float(gamma), dtype=torch.float32)
        else:
            gamma = gamma.to(embeds.device, torch.float32).reshape(-1)
            if gamma.numel() == B:
                g = gamma[:, None].expand(B, T)
            elif self.segments is not None and B == 1 and self.segments.shape[-1] == T:
                g = gamma[self.segments.clamp(max=gamma.numel() - 1)]  # one level per packed document
            else:
                raise EmbeddingNoiseError(
                    f"`noise_gamma` has {gamma.numel()} values for a batch of {B} rows; give one per row (or one per "
                    "document of a padding-free row)."
                )
        if self.mask is not None:  # with a KV cache the mask spans the past too: the last T columns are these tokens
            g = g * self.mask[:, -T:].to(g.device, torch.float32)
        return g.unsqueeze(-1) if bool(g.gt(0).any()) else None

    def _perturb(self, _module: nn.Module, _args: object, embeds: torch.Tensor) -> torch.Tensor:
        g = self._per_position_gamma(embeds)
        if g is None:
            return embeds
        eps = torch.randn(embeds.shape, generator=self.generator, device=embeds.device, dtype=torch.float32)
        noise = (self.mean + g * self.sigma * eps) * g.gt(0)
        self.calls += 1
        return (embeds.float() + noise).to(embeds.dtype)


def noise_stream(model: nn.Module, seed: int) -> torch.Generator:
    """A fresh noise stream for `seed`, on the device of `model`'s input embeddings (the CPU for a meta device): the
    library's one way from a seed to the generator every draw of a noisy block comes from."""
    module = input_embedding_module(model)
    device = getattr(module, "weight", next(unwrap_model(model).parameters())).device
    return torch.Generator(device=device if device.type != "meta" else "cpu").manual_seed(seed)


@contextmanager
def hooked(
    model: nn.Module,
    module: nn.Module,
    capture: Callable[[nn.Module, tuple[Any, ...], Kwargs], None],
    perturb: Callable[[nn.Module, Any, torch.Tensor], torch.Tensor],
) -> Iterator[None]:
    """`capture(backbone, args, kwargs)` before every call of `model`'s backbone (it is always entered through
    `__call__` with the attention mask and position ids as keywords; PEFT calls the outer model's `.forward` directly,
    which would skip a hook there) and `perturb(module, args, embeds)` after every call of the embedding `module`,
    inside the block; removed on leaving it, even through an exception."""
    backbone = getattr(model, "base_model", model)
    handles = [backbone.register_forward_pre_hook(capture, with_kwargs=True), module.register_forward_hook(perturb)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


MOVED = {"noisy": "constrained_sft.noise.entry", "embedding_noise": "constrained_sft.noise.entry"}


def __getattr__(name: str) -> object:
    """`noisy` and `embedding_noise` moved to `noise.entry` (which builds a VLM's noise as well): still importable from
    here for a release, with a FutureWarning naming the new place. Read lazily: `entry` imports this module."""
    if name not in MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    import warnings

    warnings.warn(
        f"`{__name__}.{name}` moved to `{MOVED[name]}.{name}` (also `constrained_sft.noise.{name}`); the old path goes "
        "in the next release.",
        FutureWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(MOVED[name]), name)
