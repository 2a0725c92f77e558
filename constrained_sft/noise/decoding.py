"""
The embedding noise of one `generate()` call, drawn before its decoding steps read it: the same noise model as
`embedding.noisy` (e ~ N(mu, (gamma sigma_x)^2 I) on every real token, prompt and generated), with the draws laid out
by slot instead of by call, so that a decoding step only reads.

A batch of B left-padded prompts of T columns decoding at most S new tokens has T + S slots per row: the prompt's
columns, then one per new token. On the first call the hook draws every slot's noise at once from the batch's stream,
`noise[b, j] = (mu + gamma_b sigma_x eps[b, j]) [gamma_b > 0] real[b, j]` (`[B, T + S, D]` float32, zero-padded to
`slots` columns: B x slots x D x 4 bytes, e.g. 53 MB at B = 100, slots = 232, D = 576; the padding columns are zero). The prompt's calls read its columns in
order; a decoding step reads the slots of its tokens from their position ids (slot = position + the row's padding),
tensors in, tensor out. So the step asks the host nothing (no `bool()`, no `.item()`) and calls no generator: under
`torch.compile` it traces into the compiled forward without a graph break, and eager and compiled decoding read the
same numbers (`eval generate --compile`). The host reads left are a fixed few per batch, when the block is entered:
the levels checked, the left padding checked, whether any level is > 0 (and sigma_x, when it is measured). Written by hand: transformers' decoding loop has no place for per-step random inputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..utils.modules import unwrap_model
from ..utils.types import Kwargs
from .embedding import EmbeddingNoiseError, check_gamma, check_sigma, hooked, input_embedding_module, module_sigma


class DecodingNoise:
    """The state of one generation's noise: levels, slots and (after the first call) the drawn bank. Use
    [`noisy_decoding`] rather than this class directly."""

    def __init__(
        self,
        model: nn.Module,
        gamma: float | torch.Tensor,
        generator: torch.Generator | None,
        attention_mask: torch.Tensor,
        max_new_tokens: int,
        mean: float = 0.0,
        sigma: float | None = None,
        slots: int | None = None,
    ):
        check_gamma(gamma)
        check_sigma(sigma)
        if attention_mask.dim() != 2 or max_new_tokens < 1:
            raise EmbeddingNoiseError(
                f"decoding noise needs the prompts' [B, T] attention mask and max_new_tokens >= 1, got a mask of "
                f"shape {tuple(attention_mask.shape)} and {max_new_tokens}."
            )
        real = attention_mask.bool()  # [B, T]
        B, T = real.shape
        self.pads = T - real.sum(1)  # [B] padding columns on the left of each row
        left = torch.arange(T, device=real.device)[None, :] >= self.pads[:, None]
        levels = torch.as_tensor(gamma, dtype=torch.float32, device=real.device).reshape(-1)
        if levels.numel() not in (1, B):
            raise EmbeddingNoiseError(
                f"`gamma` has {levels.numel()} values for {B} prompts; give one, or one per row."
            )
        levels = levels.expand(B)
        if not torch.equal(real, left):  # a host read, once per batch
            raise EmbeddingNoiseError("decoding noise needs left-padded prompts (`tokenizer.padding_side = 'left'`).")
        self.model = unwrap_model(model)
        self.module = input_embedding_module(model)
        self.sigma = float(sigma) if sigma is not None else module_sigma(self.module)
        self.gamma, self.mean, self.generator = levels, float(mean), generator
        self.silent = not bool(levels.gt(0).any())  # every level 0: the model is left bit-exact, nothing drawn
        self.real = torch.cat([real, real.new_ones(B, max_new_tokens)], 1)  # [B, T + S]
        self.slots = max(slots or 0, T + max_new_tokens)
        self.prompt = T
        self.filled = 0  # prompt columns (or, without position ids, slots) read so far
        self.prefilled = False  # every prompt column read: the calls now are decoding steps
        self.positions: torch.Tensor | None = None  # [B, T_call] position ids of the current call
        self.bank: torch.Tensor | None = None  # [B, slots, D] float32, drawn on the first call

    def _capture_call(self, _module: nn.Module, args: tuple[Any, ...], kwargs: Kwargs) -> None:
        positions = kwargs.get("position_ids")
        self.positions = positions if torch.is_tensor(positions) and positions.dim() == 2 else None

    def _draw(self, embeds: torch.Tensor) -> torch.Tensor:
        B, D = embeds.shape[0], embeds.shape[-1]
        if self.real.shape[0] != B:
            raise EmbeddingNoiseError(
                f"decoding noise was drawn for {self.real.shape[0]} rows and the model is called with {B} "
                "(beam search or several sequences per prompt): decode one sequence per prompt."
            )
        device = embeds.device
        eps = torch.randn((B, self.real.shape[1], D), generator=self.generator, device=device, dtype=torch.float32)
        g = self.gamma.to(device)[:, None, None]  # [B, 1, 1]
        drawn = (self.mean + g * self.sigma * eps) * (g.gt(0) & self.real.to(device)[..., None])
        return F.pad(drawn, (0, 0, 0, self.slots - drawn.shape[1]))  # zero slots up to `slots`: one shape a run

    def _perturb(self, _module: nn.Module, _args: object, embeds: torch.Tensor) -> torch.Tensor:
        if self.silent:
            return embeds
        if self.bank is None:
            self.bank = self._draw(embeds)
        T, D = embeds.shape[1], embeds.shape[-1]
        # The compiled step sees only flags that stay fixed while decoding (a batch's prompt length would recompile)
        if not self.prefilled or self.positions is None:
            # the prompt's columns in order (one prefill call or its chunks); a model given no position ids reads
            # its steps in order too (eager; a compiled step would recompile for every step)
            noise = self.bank[:, self.filled : self.filled + T]
            self.filled += T
            self.prefilled = self.filled >= self.prompt
        else:  # a decoding step: its tokens' slots from their positions; [B, T_call] -> [B, T_call, D]
            slots = (self.positions + self.pads[:, None]).clamp(max=self.slots - 1)
            noise = self.bank.gather(1, slots.unsqueeze(-1).expand(-1, -1, D))
        return (embeds.float() + noise).to(embeds.dtype)


@contextmanager
def noisy_decoding(
    model: nn.Module,
    gamma: float | torch.Tensor,
    generator: torch.Generator | None,
    attention_mask: torch.Tensor,
    max_new_tokens: int,
    mean: float = 0.0,
    sigma: float | None = None,
    slots: int | None = None,
) -> Iterator[DecodingNoise]:
    """
    `model`'s token embeddings perturbed inside the block for one `generate()` call of the left-padded prompts whose
    `[B, T]` `attention_mask` is given, decoding at most `max_new_tokens`: `noisy`'s noise model and arguments, every
    draw made on the first call (see the module docstring), so that eager and compiled decoding read the same draws.
    `slots`: the bank's length when longer than T + S, zero-padded (the static cache's length, so that every batch of
    a run hands a compiled step the same shapes; the draws do not depend on it).

        with noisy_decoding(model, 1.5, noise_stream(model, 0), enc["attention_mask"], 64):
            model.generate(**enc, max_new_tokens=64)
    """
    noise = DecodingNoise(model, gamma, generator, attention_mask, max_new_tokens, mean, sigma, slots)
    with hooked(noise.model, noise.module, noise._capture_call, noise._perturb):
        yield noise
