"""
The unrolled transformer (UT, Yang et al. 2022) as a video denoiser (paper Section 4): the text UT's layers
(`models.ut`: attention Q, K, V tied across layers, X_l = ReLU(W_l Z_l + U_l X_{l-1})) on one patch position over T
frames, between a DCT analysis and a shared linear synthesis readout:

    X_0 = ReLU(E x~),   E = [D^T; -D^T]            `[B, T, 2m]`: the positive and negative parts of the DCT codes
    X_l = ReLU(W_l Z_l + U_l X_{l-1}),  Z_l = V X_{l-1} softmax[(Q X_{l-1})^T (K X_{l-1})]
    psi(X) = R X,   R = (D D^T)^{-1} [D, -D]         `[B, T, P]`: the readout shared by every layer

D `[P, m]` is the 2-D DCT dictionary (B.2: "weight initialization in video uses a Discrete Cosine Transform for DUST
and UT"). Readings where the paper is silent: the codes are split into positive and negative parts so that the
ReLU layers can carry signed DCT coefficients (psi(X_0) = x~ exactly at the start); U_l starts at the identity and
W_l at zero, so every layer starts as the identity and psi(X_l) = x~ before training (a denoiser that starts from
"return the input"); Q, K, V are Xavier as in the text UT; E, R, Q, K, V, W_l, U_l are all trained.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModel, PreTrainedModel

from .configs import VideoUTConfig
from .denoising import DenoiserMixin, PixelInput, dct_dictionary
from .ut import UTAttention, UTLayer


class VideoUTPreTrainedModel(PreTrainedModel):
    config_class = VideoUTConfig
    base_model_prefix = "ut"
    main_input_name = "input_values"

    def _init_weights(self, module: nn.Module) -> None:
        """Nothing here: the model sets its DCT start in `__init__` (`reset_to_dct`), loading overwrites it."""


class VideoUTForDenoising(DenoiserMixin, VideoUTPreTrainedModel):
    """x~ `[B, T, P]` -> psi(X_L) `[B, T, P]`."""

    def __init__(self, config: VideoUTConfig) -> None:
        super().__init__(config)
        P, width = config.patch_size**2, config.hidden_size
        self.analysis = nn.Linear(P, width, bias=False)  # E
        self.attention = UTAttention(config)  # Q, K, V tied across layers
        self.layers = nn.ModuleList(UTLayer(config) for _ in range(config.num_hidden_layers))
        self.synthesis = nn.Linear(width, P, bias=False)  # R, the shared readout
        self.pixels = PixelInput(config.data_std)
        self.post_init()
        self.reset_to_dct()

    @torch.no_grad()
    def reset_to_dct(self) -> None:
        """E = [D^T; -D^T], R = (D D^T)^{-1} [D, -D], U_l = I, W_l = 0, Q, K, V Xavier (module docstring)."""
        D = dct_dictionary(self.config.patch_size, self.config.dictionary_atoms_per_side).double()  # [P, m]
        self.analysis.weight.copy_(torch.cat([D.T, -D.T]))
        self.synthesis.weight.copy_(torch.linalg.solve(D @ D.T, torch.cat([D, -D], 1)))
        for layer in self.layers:
            nn.init.eye_(layer.get_parameter("u.weight"))
            nn.init.zeros_(layer.get_parameter("w.weight"))
        for proj in (self.attention.q, self.attention.k, self.attention.v):
            nn.init.xavier_uniform_(proj.weight)

    def backbone(self, noisy: torch.Tensor) -> list[torch.Tensor]:
        """(X_0, ..., X_L), each `[B, T, 2m]`; per token and layer about 5 (2m)^2 + 4 T (2m) multiply-adds."""
        x = torch.relu(self.analysis(noisy))
        states = [x]
        for layer in self.layers:
            x = layer(x, self.attention(x))
            states.append(x)
        return states

    def readout(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """psi(X) = R X: any layer's codes `[B, T, 2m]` -> patches `[B, T, P]`."""
        return self.synthesis(hidden)


AutoModel.register(VideoUTConfig, VideoUTForDenoising, exist_ok=True)
