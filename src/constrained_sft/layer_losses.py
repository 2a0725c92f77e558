"""
Per-layer next-token losses as pure functions of hidden states and labels (no Trainer needed).

Shapes: B sequences of T tokens, hidden size D, vocabulary V, K selected next-token positions, S sequences
(documents: a packed / padding-free row holds several), n constrained layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .readout import CausalLMReadout

IGNORE_INDEX = -100


@dataclass
class TokenSelection:
    """Which next-token positions are scored, with the weight that makes their sum an unbiased token total."""

    index: torch.Tensor  # [K] flat index into the shifted [B, T-1] grid
    targets: torch.Tensor  # [K] next-token labels
    weight: torch.Tensor  # [K] fp32: 1 for all tokens, n_s / k_s for a sample of k_s of a sequence's n_s tokens
    segment: torch.Tensor  # [K] sequence id in [0, S)
    segment_tokens: torch.Tensor  # [S] supervised tokens of each sequence (n_s)
    num_tokens: torch.Tensor  # [] supervised tokens in the batch (N = sum n_s)


def segment_ids(labels: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """
    Sequence id of each shifted position, `[B, T-1]`: the row, or with `position_ids` (packing, padding-free) the
    document, which starts wherever the position id restarts at 0.
    """
    B, T = labels.shape
    if position_ids is None:
        return torch.arange(B, device=labels.device).unsqueeze(1).expand(B, T - 1)
    starts = position_ids[:, :-1].eq(0)
    starts[:, 0] = True
    return starts.reshape(-1).long().cumsum(0).sub(1).view(B, T - 1)


def select_tokens(
    labels: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    per_sequence: int | None = None,
    generator: torch.Generator | None = None,
) -> TokenSelection:
    """
    All supervised next-token positions of `labels` (`[B, T]`, -100 = ignored), or with `per_sequence=k` a uniform
    sample without replacement of `min(k, n_s)` of each sequence's `n_s` positions, weighted `n_s / min(k, n_s)` so
    that the weighted sum is an unbiased estimate of the all-token sum (Horvitz-Thompson).
    """
    targets = labels[:, 1:].reshape(-1)
    segments = segment_ids(labels, position_ids).reshape(-1)
    supervised = targets.ne(IGNORE_INDEX)
    index = supervised.nonzero().squeeze(1)
    segment = segments[index]
    num_segments = int(segments.max().item()) + 1 if segments.numel() else 0
    segment_tokens = torch.zeros(num_segments, device=labels.device, dtype=torch.long)
    segment_tokens.scatter_add_(0, segment, torch.ones_like(segment))
    weight = torch.ones(index.numel(), device=labels.device, dtype=torch.float32)
    if per_sequence is not None and index.numel():
        # Random keys, sorted within each sequence: the k smallest form a uniform sample without replacement.
        keys = torch.rand(index.numel(), generator=generator, device=generator.device if generator else "cpu")
        order = torch.argsort(segment.double() + keys.to(index.device).double())
        first = torch.cumsum(segment_tokens, 0) - segment_tokens  # [S] offset of each sequence in sorted order
        rank = torch.arange(index.numel(), device=index.device) - first[segment[order]]
        keep = order[rank < per_sequence].sort().values
        index, segment = index[keep], segment[keep]
        taken = segment_tokens.clamp(max=per_sequence)
        weight = segment_tokens[segment].float() / taken[segment].float()
    return TokenSelection(
        index=index,
        targets=targets[index],
        weight=weight,
        segment=segment,
        segment_tokens=segment_tokens,
        num_tokens=supervised.sum(),
    )


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
    h = hidden[:, :-1].reshape(-1, hidden.size(-1))[selection.index]  # [K, D]
    return readout.token_nll(h, selection.targets, apply_norm=apply_norm)


# Rows per stacked readout call: bounds the transient `[rows, D]` stack (37 MiB at D = 576 in fp32, 128 MiB at
# D = 4096 in bf16) while a small sample of every layer still goes through in one call.
STACK_ROWS = 16384


def layers_token_nll(
    hiddens: Sequence[torch.Tensor], selection: TokenSelection, readout: CausalLMReadout, apply_norm: bool
) -> torch.Tensor:
    """
    `[n, K]` NLL of n layers' hidden states (each `[B, T, D]`) at the same selected positions, with the layers
    stacked into as few readout calls on `[g*K, D]` rows as `STACK_ROWS` allows: the head's `[V, D]` weight is read,
    and its gradient formed, once per call instead of once per layer. For small samples that memory traffic, not the
    6 x D x V FLOPs per row, is the cost.
    """
    n, K = len(hiddens), selection.index.numel()
    if n == 0 or K == 0:
        return torch.zeros(n, K, device=hiddens[0].device if n else None)
    group = max(1, STACK_ROWS // K)
    out = []
    for s in range(0, n, group):
        part = hiddens[s : s + group]
        rows = torch.stack([h[:, :-1].reshape(-1, h.size(-1))[selection.index] for h in part])  # [g, K, D]
        nll = readout.token_nll(rows.reshape(-1, rows.size(-1)), selection.targets.repeat(len(part)), apply_norm)
        out.append(nll.view(len(part), K))
    return torch.cat(out)


@dataclass
class LayerLosses:
    """Losses of the n measured layers on one batch; `sums` keeps the graph when the layers were read with grad."""

    sums: torch.Tensor  # [n] weighted token-loss sums: f_l(batch) = sums[l] / num_tokens
    per_sequence: torch.Tensor  # [n, S] per-sequence mean losses (detached)
    segment_tokens: torch.Tensor  # [S] supervised tokens per sequence; 0 = no loss, excluded from statistics
    num_tokens: torch.Tensor  # [] supervised tokens in the batch

    @property
    def means(self) -> torch.Tensor:
        return self.sums.detach().double() / self.num_tokens.clamp(min=1)


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


@dataclass
class BatchScore:
    """A held-out batch as the evaluation sees it: final-layer hits and NLL, and the measured layers' losses."""

    correct: float  # tokens (or examples) whose top-1 prediction is right
    count: float  # supervised tokens (or examples)
    nll: float  # summed final-layer NLL
    layers: LayerLosses


def step_ratios(losses: LayerLosses) -> torch.Tensor:
    """`[(n-1) * S']` ratios f_l / f_{l-1} of every sequence with supervised tokens, for every consecutive layer pair."""
    per_seq = losses.per_sequence[:, losses.segment_tokens.gt(0)]  # [n, S']
    return (per_seq[1:] / per_seq[:-1].clamp(min=1e-12)).flatten()


def descent_counts(losses: LayerLosses) -> tuple[torch.Tensor, torch.Tensor]:
    """(descending steps, all steps) over (sequence, consecutive measured layers) with f_l < f_{l-1}."""
    valid = losses.segment_tokens.gt(0)  # [S]
    per_seq = losses.per_sequence[:, valid]  # [n, S']
    steps = per_seq[1:] < per_seq[:-1]  # [n-1, S']
    return steps.sum(), torch.tensor(steps.numel(), device=steps.device)
