"""
What the three video denoisers (DUST, the video UT, the ViT denoiser) share: the readout contract for real-valued
targets, the pixel input where the noise goes in, and the DCT dictionary DUST and UT start from.

Every denoiser takes `input_values` `[B, T, P]`: T tokens of P = patch_size^2 grey levels in [0, 1] (DUST and UT: one
16 x 16 patch position over T frames; ViT: the 100 patches of one 160 x 160 frame), and `labels`, the clean tokens of
the same shape. It returns the reconstruction `logits` `[B, T, P]`, `loss` = its mean squared error, and
`hidden_states` (h_0, ..., h_L) that its `readout(hidden)` turns into reconstructions, so that `ConstrainedTrainer`
constrains every layer with `loss='squared_error'` (`config.problem_type = 'regression'`).

Noise: the paper perturbs the frames, x~ = x + e, e ~ N(mu, (gamma sigma_x)^2 I), sigma_x the std of the clean data.
`PixelInput` is the identity module the library's noise hook perturbs (`get_input_embeddings()` returns it) and it
carries sigma_x (`config.data_std`, measured on the clean training frames and saved with the model), so training,
`eval robustness` and a user's own `embedding_noise(model, gamma)` all perturb the pixels at the data's scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from transformers.modeling_outputs import ModelOutput


def dct_dictionary(side: int, atoms_per_side: int) -> torch.Tensor:
    """
    The separable 2-D DCT dictionary for `side x side` patches, `[side^2, atoms_per_side^2]`, unit-norm columns:
    1-D atoms d_j[i] = cos(pi (2i + 1) j / (2k)), i < side, j < k = atoms_per_side (DCT-II frequencies; k > side
    gives an overcomplete set), then the Kronecker product of the 1-D dictionary with itself (row-major patches).
    With k = side it is the orthonormal DCT-II basis (`scipy.fft.dct(eye, norm='ortho').T`).
    """
    if atoms_per_side < side:
        raise ValueError(f"`dictionary_atoms_per_side` must be >= the patch side {side}, got {atoms_per_side}.")
    i = torch.arange(side, dtype=torch.float64)[:, None]
    j = torch.arange(atoms_per_side, dtype=torch.float64)[None, :]
    one_d = torch.cos(math.pi * (2 * i + 1) * j / (2 * atoms_per_side))  # [side, k]
    one_d = one_d / one_d.norm(dim=0, keepdim=True)
    return torch.kron(one_d, one_d).float()  # [side^2, k^2]


class PixelInput(nn.Module):
    """The identity on the pixel tokens `[B, T, P]`: the point where the noise hook adds e. `sigma` = sigma_x."""

    def __init__(self, sigma: float | None) -> None:
        super().__init__()
        self.sigma = sigma

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        return values


class DenoiserMixin:
    """The readout-contract plumbing of a denoiser; the class defines `backbone(x) -> hidden states` and `readout`."""

    config: Any  # the model's config; `patch_size` is read here
    pixels: nn.Module
    backbone: Callable[[torch.Tensor], Sequence[torch.Tensor]]  # pixel tokens [B, T, P] -> (h_0, ..., h_L)
    readout: Callable[[torch.Tensor], torch.Tensor]  # h [B, T, D] -> pixels [B, T, P]

    def get_input_embeddings(self) -> nn.Module:
        return self.pixels

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.pixels = value

    def _check_tokens(self, values: torch.Tensor) -> None:
        P = self.config.patch_size**2
        if values.dim() != 3 or values.shape[-1] != P:
            raise ValueError(
                f"`input_values` must be [batch, tokens, {P}] (patches of {self.config.patch_size}x"
                f"{self.config.patch_size} grey levels), got {tuple(values.shape)}."
            )

    def forward(self, input_values=None, labels=None, output_hidden_states=None, **kwargs) -> ModelOutput:
        self._check_tokens(input_values)
        states = self.backbone(self.pixels(input_values))  # (h_0, ..., h_L)
        logits = self.readout(states[-1])  # [B, T, P]
        loss = None if labels is None else nn.functional.mse_loss(logits.float(), labels.float())
        return ModelOutput(loss=loss, logits=logits, hidden_states=tuple(states) if output_hidden_states else None)
