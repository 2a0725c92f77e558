"""
DUST, the Deep Unfolded Sequential Transformer of De Weerdt et al. (2023), for video denoising as the paper trains it
(Section 4, Appendix C.3, with the changes of C.4). Each example is one patch position over T frames: x~ `[T, P]`,
P = 16 x 16 grey levels; each frame's patch has a sparse code h_t `[m]` over a dictionary D `[P, m]` (m > P:
overcomplete, initialised to the 2-D DCT). Layer l unrolls one step on the codes H `[T, m]` of

    sum_t 1/2 ||x~_t - D h_t||^2 + lambda_1 ||h_t||_1 + lambda_2 E(H)      (C.3 eq. 74, A = I: no compressed sensing)

as a symmetric softmax attention followed by a LISTA step (C.3 eqs. 75-76):

    Z_l  = softmax(H_{l-1} H_{l-1}^T / sqrt(m)) H_{l-1}            symmetric attention of every frame's code
    M_l  = (1 - lambda_2) H_{l-1} + lambda_2 Z_l                      the step on the attention energy
    H_l  = S_theta(U_l M_l + W_l x~),  W_l = D_l^T / c,  U_l = I - D_l^T D_l / c,  theta = lambda_1 / c

with S_theta the soft threshold, c = ||D_0||_2^2 (the Lipschitz constant of the data term's gradient at the DCT
start), H_0 = 0 (so layer 1 is the first ISTA step), and the reconstruction of layer l, x^_l = D_l H_l.

The paper's changes (C.4), all followed: no measurement matrix (A = I); W_l and U_l stay coupled to D_l (not learnt
separately); lambda_1, lambda_2 and c are fixed (learning them let the model satisfy the descent constraints
trivially by zeroing a term); the only trainable parameters are the dictionaries: one D shared by every layer
(`tie_dictionaries=True`, the paper's unconstrained DUST) or one D_l per layer (the default; the paper's constrained
DUST). This library trains both arms of a comparison with the same architecture (the default), so that the
comparison measures the constraints only.

Readings where the paper is silent (its C.3 equations lost their symbols): the step on the attention energy is taken
as the convex mix M_l above (lambda_2 the mixing weight); the attention scale 1/sqrt(m); H_0 = 0. Layer l's output
is read through its own dictionary, so `hidden_states` are the reconstructions (x~, x^_1, ..., x^_L) and the readout
psi is the identity: h_0 is the noisy input, whose loss is the noise energy.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import AutoModel, PreTrainedModel

from .configs import DUSTConfig
from .denoising import DenoiserMixin, PixelInput, dct_dictionary


def soft_threshold(x: torch.Tensor, theta: float) -> torch.Tensor:
    """S_theta(x) = sign(x) max(|x| - theta, 0), the proximal operator of theta ||.||_1."""
    return torch.sign(x) * torch.relu(x.abs() - theta)


class DUSTPreTrainedModel(PreTrainedModel):
    config_class = DUSTConfig
    base_model_prefix = "dust"
    main_input_name = "input_values"

    def _init_weights(self, module: nn.Module) -> None:
        """Nothing here: every dictionary starts at the DCT in `__init__` (B.2), loading overwrites it."""


class DUSTForDenoising(DenoiserMixin, DUSTPreTrainedModel):
    """x~ `[B, T, P]` -> x^ = D_L H_L `[B, T, P]`; trainable: the dictionaries only."""

    def __init__(self, config: DUSTConfig) -> None:
        super().__init__(config)
        m = config.num_atoms
        start = dct_dictionary(config.patch_size, config.dictionary_atoms_per_side)  # [P, m]
        count = 1 if config.tie_dictionaries else config.num_hidden_layers
        self.dictionaries = nn.ParameterList(nn.Parameter(start.clone()) for _ in range(count))
        # c: fixed with lambda_1, lambda_2 (C.4); largest eigenvalue of D^T D at the DCT start
        self.register_buffer("lipschitz", torch.linalg.matrix_norm(start, ord=2).square(), persistent=True)
        self.pixels = PixelInput(config.data_std)
        self.scale = 1 / math.sqrt(m)
        self.post_init()

    def dictionary(self, layer: int) -> torch.Tensor:
        """D_l `[P, m]` of layer l = 1..L."""
        return self.dictionaries[0 if self.config.tie_dictionaries else layer - 1]

    def backbone(self, noisy: torch.Tensor) -> list[torch.Tensor]:
        """(x~, x^_1, ..., x^_L), each `[B, T, P]`. Costs per token and layer about 2 P m + m^2 multiply-adds."""
        c = self.lipschitz
        theta = self.config.sparsity_weight / c
        lam = self.config.attention_weight
        codes = noisy.new_zeros(*noisy.shape[:-1], self.config.num_atoms)  # H_0 = 0, [B, T, m]
        states = [noisy]
        for layer in range(1, self.config.num_hidden_layers + 1):
            D = self.dictionary(layer)
            attention = (codes @ codes.transpose(1, 2) * self.scale).softmax(-1)  # [B, T, T]
            mixed = (1 - lam) * codes + lam * (attention @ codes)  # M_l
            # U_l M + W_l x~ = M - D^T (D M - x~) / c, without forming the m x m matrix U_l
            codes = soft_threshold(mixed - (mixed @ D.T - noisy) @ D / c, theta)
            states.append(codes @ D.T)  # x^_l = D_l H_l
        return states

    def readout(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """psi = identity: DUST's layers are already read out through their own dictionaries (module docstring)."""
        return hidden


AutoModel.register(DUSTConfig, DUSTForDenoising, exist_ok=True)
