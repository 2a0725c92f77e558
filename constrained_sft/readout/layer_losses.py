"""
Per-layer next-token losses as pure functions of hidden states, a token selection and a readout (no Trainer needed).

Shapes: B sequences of T tokens, hidden size D, vocabulary V, K selected next-token positions, S sequences
(documents: a packed / padding-free row holds several), n constrained layers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..constraints.stats import LayerLosses
from .causal_lm import CausalLMReadout
from .tokens import TokenSelection


def layer_token_nll(
    hidden: torch.Tensor, selection: TokenSelection, readout: CausalLMReadout, apply_norm: bool
) -> torch.Tensor:
    """
    `[K]` fp32 next-token NLL of one layer's hidden states `[B, T, D]` at the selected positions.

    Gathers `[K, D]` first, so the norm and head only see selected tokens; the head runs in vocabulary tiles and
    recomputes them in the backward, so the extra peak memory is one tile of logits, never `[K, V]`.
    """
    if selection.index.numel() == 0:
        return torch.zeros(0, device=hidden.device)
    h = selection.hidden_rows(hidden)  # [K, D]
    return readout.token_nll(h, selection.targets, apply_norm=apply_norm)


# Rows per stacked readout call: bounds the transient `[rows, D]` stack (37 MiB at D = 576 in fp32, 128 MiB at
# D = 4096 in bf16) while a small sample of every layer still goes through in one call.
STACK_ROWS = 16384


def stacked_layers(rows: int) -> int:
    """How many layers one readout call stacks when each contributes `rows` rows (at most `STACK_ROWS` in all)."""
    return max(1, STACK_ROWS // max(rows, 1))


def layers_token_nll(
    hiddens: Sequence[torch.Tensor],
    selection: TokenSelection,
    readout: CausalLMReadout,
    apply_norm: bool,
    layers_per_call: int | None = None,
) -> torch.Tensor:
    """
    `[n, K]` NLL of n layers' hidden states (each `[B, T, D]`) at the same selected positions, with the layers
    stacked into as few readout calls on `[g*K, D]` rows as `STACK_ROWS` allows: the head's `[V, D]` weight is read,
    and its gradient formed, once per call instead of once per layer. For small samples that memory traffic, not the
    6 x D x V FLOPs per row, is the cost. g is `layers_per_call`, by default `stacked_layers(K)`: data-parallel ranks
    whose head is gathered per call pass a g they all share, so that every rank makes the same number of calls.
    """
    n, K = len(hiddens), selection.index.numel()
    if n == 0 or K == 0:
        return torch.zeros(n, K, device=hiddens[0].device if n else None)
    group = layers_per_call or stacked_layers(K)
    out = []
    for s in range(0, n, group):
        part = hiddens[s : s + group]
        rows = torch.stack([selection.hidden_rows(h) for h in part])  # [g, K, D]
        nll = readout.token_nll(rows.reshape(-1, rows.size(-1)), selection.targets.repeat(len(part)), apply_norm)
        out.append(nll.view(len(part), K))
    return torch.cat(out) if len(out) > 1 else out[0]


def aggregate(token_nll: torch.Tensor, selection: TokenSelection) -> LayerLosses:
    """Per-layer weighted sums `[n]` and per-sequence means `[n, S]` from per-token losses `[n, K]`."""
    weighted = token_nll * selection.weight  # [n, K]
    sums = weighted.sum(dim=1)
    S = selection.segment_tokens.numel()
    per_seq = torch.zeros(token_nll.size(0), S, device=token_nll.device, dtype=torch.float32)
    per_seq.index_add_(1, selection.segment, weighted.detach().float())
    per_seq = per_seq / selection.segment_tokens.clamp(min=1).float()
    return LayerLosses(
        sums=sums, per_sequence=per_seq, segment_tokens=selection.segment_tokens, num_tokens=selection.num_tokens
    )
