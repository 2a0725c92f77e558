"""
Which next-token positions the intermediate readouts score: every supervised position, or an unbiased sample of k
per sequence (documents, for packed / padding-free rows), with the weights that make a sampled sum estimate the
all-token sum.

Shapes: B sequences of T tokens, K selected next-token positions, S sequences (documents).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace

import torch

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

    def padded(self) -> TokenSelection:
        """
        This selection, or for an empty one (no supervised token in the batch) one dummy row of weight 0 (position
        0, target 0): the readouts then run, forward and backward, on every data-parallel rank alike, since under
        ZeRO-3 / FSDP each readout call gathers the LM head, a collective every rank must enter. The dummy row adds
        exactly 0 to every loss and gradient.
        """
        if self.index.numel():
            return self
        zero = self.index.new_zeros(1)
        return replace(self, index=zero, targets=zero, weight=self.weight.new_zeros(1), segment=zero)


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


def row_keys(rows: int, width: int, seed: int, first_row: int = 0) -> torch.Tensor:
    """
    `[rows, width]` uniform keys; row b comes from its own stream, a function of (`seed`, `first_row` + b) only, so
    a sequence gets the same keys whichever micro-batch or rank carries it (B rows on this rank and micro-batch m
    of an optimizer step are rows (m x world + rank) x B ... of its global batch).
    """
    return torch.stack(
        [
            torch.rand(width, generator=torch.Generator().manual_seed(zlib.crc32(f"{seed}/{first_row + b}".encode())))
            for b in range(rows)
        ]
    )


def select_tokens(
    labels: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    per_sequence: int | None = None,
    seed: int = 0,
    first_row: int = 0,
) -> TokenSelection:
    """
    All supervised next-token positions of `labels` (`[B, T]`, -100 = ignored), or with `per_sequence=k` a uniform
    sample without replacement of `min(k, n_s)` of each sequence's `n_s` positions, weighted `n_s / min(k, n_s)` so
    that the weighted sum is an unbiased estimate of the all-token sum (Horvitz-Thompson). The sample is drawn from
    [`row_keys`]`(B, T-1, seed, first_row)`: gradient accumulation and data parallelism draw what one large batch
    would, row for row.
    """
    targets = labels[:, 1:].reshape(-1)
    segments = segment_ids(labels, position_ids).reshape(-1)
    supervised = targets.ne(IGNORE_INDEX)
    index = supervised.nonzero().squeeze(1)
    segment = segments[index]
    if not segments.numel():
        num_segments = 0
    elif position_ids is None:  # one sequence per row: known without reading the device
        num_segments = labels.shape[0]
    else:  # packed documents: how many is in the data (one device sync)
        num_segments = int(segments.max().item()) + 1
    segment_tokens = torch.zeros(num_segments, device=labels.device, dtype=torch.long)
    segment_tokens.scatter_add_(0, segment, torch.ones_like(segment))
    weight = torch.ones(index.numel(), device=labels.device, dtype=torch.float32)
    if per_sequence is not None and index.numel():
        # Random keys, sorted within each sequence: the k smallest form a uniform sample without replacement.
        keys = row_keys(labels.shape[0], labels.shape[1] - 1, seed, first_row).reshape(-1).to(index.device)[index]
        order = torch.argsort(segment.double() + keys.double())
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
