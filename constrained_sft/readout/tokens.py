"""
Which next-token positions the intermediate readouts score: every supervised position, or an unbiased sample of k
per sequence (documents, for packed / padding-free rows), with the weights that make a sampled sum estimate the
all-token sum.

Shapes: B sequences of T tokens, K selected next-token positions, S sequences (documents).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import overload

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


@dataclass
class TokenSelection:
    """Which next-token positions are scored, with the weight that makes their sum an unbiased token total."""

    index: torch.Tensor  # [K] flat index into the shifted [B, T-1] grid
    targets: torch.Tensor  # [K] next-token labels
    weight: torch.Tensor  # [K] fp32: 1 for all tokens, n_s / k_s for a sample of k_s of n_s, 0 for a filler row
    segment: torch.Tensor  # [K] sequence id in [0, S)
    segment_tokens: torch.Tensor  # [S] supervised tokens of each sequence (n_s)
    num_tokens: torch.Tensor  # [] supervised tokens in the batch (N = sum n_s)
    positions: torch.Tensor  # [K] the same positions as flat indices into the unshifted [B, T] grid
    # `positions` are every row of the [B, T] grid in order (K = B x T): a layer is read as its own [B*T, D] view
    whole_layer: bool = False

    def hidden_rows(self, hidden: torch.Tensor) -> torch.Tensor:
        """`[K, D]` rows of a layer's hidden states `[B, T, D]` at the selected positions, read from its `[B*T, D]`
        view (slicing off the last position first would copy the whole layer). A `whole_layer` selection is that
        view: no gather forward, and no `[B*T, D]` zero fill and index-add per layer backward."""
        flat = hidden.reshape(-1, hidden.size(-1))
        if self.whole_layer and flat.size(0) == self.positions.numel():
            return flat
        return flat.index_select(0, self.positions)

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
        return replace(
            self,
            index=zero,
            targets=zero,
            weight=self.weight.new_zeros(1),
            segment=zero,
            positions=zero,
            whole_layer=False,
        )


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


MASK32 = 0xFFFFFFFF
# Larger than any key: positions that must never be sampled
NEVER = 1 << 32
# Shapes whose index tensors are kept (a few batch shapes per run; 16 x B x T int64 at most)
LAYOUTS = 16


@overload
def _mix32(x: int) -> int: ...
@overload
def _mix32(x: torch.Tensor) -> torch.Tensor: ...
def _mix32(x: torch.Tensor | int) -> torch.Tensor | int:
    """A 32-bit integer hash (two xor-shift-multiply rounds) on int64 values < 2^32; every product stays < 2^59."""
    for _ in range(2):
        x = (((x >> 16) ^ x) * 0x45D9F3B) & MASK32
    return (x >> 16) ^ x


@functools.lru_cache(maxsize=LAYOUTS)
def _position_keys(rows: int, width: int, first_row: int, device: torch.device) -> torch.Tensor:
    """`[rows, width]` hashes of (global row, position), without the seed: the part of `row_keys` a batch shape
    fixes, built once per (shape, micro-batch, rank)."""
    with torch.inference_mode(False):  # usable by autograd later even if first built under inference mode
        row = _mix32(torch.arange(first_row, first_row + rows, device=device, dtype=torch.long) & MASK32)
        column = torch.arange(width, device=device, dtype=torch.long) * 0x9E3779B1  # < 2^52 for any length
        return _mix32((row[:, None] + column[None, :]) & MASK32)


def row_keys(rows: int, width: int, seed: int, first_row: int = 0, device: torch.device | None = None) -> torch.Tensor:
    """
    `[rows, width]` int64 keys, uniform on [0, 2^32), computed on `device` (no generator, no host copy): key (b, t)
    is a hash of (`seed`, `first_row` + b, t) only, so a sequence gets the same keys whichever micro-batch or rank
    carries it (B rows on this rank and micro-batch m of an optimizer step are rows (m x world + rank) x B ... of its
    global batch). The (row, position) hashes are kept per shape; a new seed costs one xor and one hash (11 ops).
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    return _mix32(_position_keys(rows, width, first_row, device) ^ _mix32(seed & MASK32))


@dataclass(frozen=True)
class _RowLayout:
    """The index tensors of a row sample that depend only on (B, T, k): built once per shape (see `LAYOUTS`)."""

    shifted: torch.Tensor  # [B, 1] flat index of each row's first position in the shifted [B, T-1] grid
    unshifted: torch.Tensor  # [B, 1] the same in the unshifted [B, T] grid
    segment: torch.Tensor  # [K] row of each selected position: K = B*k, or B*T when k = T - 1
    # k = T - 1 >= 1 only: [B*T] (index, positions) of every position, the last of each row (no next token) included
    # as a weight-0 row whose shifted index repeats the row's last one (a valid index; it adds exactly 0)
    every: tuple[torch.Tensor, torch.Tensor] | None


@functools.lru_cache(maxsize=LAYOUTS)
def _row_layout(B: int, T: int, k: int, device: torch.device) -> _RowLayout:
    with torch.inference_mode(False):  # index tensors autograd may save, even if first built under inference mode
        rows = torch.arange(B, device=device)[:, None]
        shifted, unshifted = rows * (T - 1), rows * T
        every, per_row = None, k
        if k == T - 1 and k >= 1:
            columns = torch.arange(T, device=device)[None, :]
            every = ((columns.clamp(max=k - 1) + shifted).reshape(-1), (columns + unshifted).reshape(-1))
            per_row = T
        return _RowLayout(shifted, unshifted, rows.reshape(-1).repeat_interleave(per_row), every)


def _sample_rows(labels: torch.Tensor, per_sequence: int, seed: int, first_row: int) -> TokenSelection:
    """
    `select_tokens` for one sequence per row, in static shapes: exactly k = min(per_sequence, T-1) positions per row
    (K = B x k), the k supervised ones with the smallest keys; a row with fewer than k supervised positions fills
    the rest with weight-0 rows (target 0). No data-dependent shape, so no host-device sync. When k covers every
    position (short rows, a small head), nothing is drawn: the layers are read whole (K = B x T, `whole_layer`), each
    position's weight 1 where supervised and 0 elsewhere, the last position of each row (no next token) included.
    """
    B, T = labels.shape
    width = T - 1
    k = max(0, min(per_sequence, width))
    layout = _row_layout(B, T, k, labels.device)
    targets = labels[:, 1:]
    supervised = targets.ne(IGNORE_INDEX)  # [B, T-1]
    segment_tokens = supervised.sum(1)  # [B] n_s
    if layout.every is not None:  # n_s <= k for every row: each supervised position is taken, with weight n_s / n_s
        index, positions = layout.every
        # [B, T]: a zero column for the last position, which has no next token
        return TokenSelection(
            index=index,
            positions=positions,
            targets=F.pad(targets.masked_fill(~supervised, 0), (0, 1)).reshape(-1),
            weight=F.pad(supervised.float(), (0, 1)).reshape(-1),
            segment=layout.segment,
            segment_tokens=segment_tokens,
            num_tokens=segment_tokens.sum(),
            whole_layer=True,
        )
    keys = row_keys(B, width, seed, first_row, labels.device).masked_fill_(~supervised, NEVER)
    pick = keys.topk(k, dim=1, largest=False).indices.sort(dim=1).values  # [B, k] positions, in order
    real = supervised.gather(1, pick)  # [B, k]: False where a row ran out of supervised positions
    taken = segment_tokens.clamp(max=k).clamp(min=1)  # [B] min(k, n_s)
    weight = real.float() * (segment_tokens.float() / taken.float())[:, None]
    return TokenSelection(
        index=(pick + layout.shifted).reshape(-1),
        positions=(pick + layout.unshifted).reshape(-1),
        targets=targets.gather(1, pick).masked_fill(~real, 0).reshape(-1),
        weight=weight.reshape(-1),
        segment=layout.segment,
        segment_tokens=segment_tokens,
        num_tokens=segment_tokens.sum(),
    )


def select_tokens(
    labels: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    per_sequence: int | None = None,
    seed: int = 0,
    first_row: int = 0,
    unread: tuple[int, ...] = (),
) -> TokenSelection:
    """
    All supervised next-token positions of `labels` (`[B, T]`, -100 = ignored; so are targets among the token ids
    `unread`: a VLM's image placeholders, whose features are given, not predicted), or with `per_sequence=k` a uniform
    sample without replacement of `min(k, n_s)` of each sequence's `n_s` positions, weighted `n_s / min(k, n_s)` so
    that the weighted sum is an unbiased estimate of the all-token sum (Horvitz-Thompson). The sample is drawn from
    [`row_keys`]`(B, T-1, seed, first_row)`: gradient accumulation and data parallelism draw what one large batch
    would, row for row.

    Host-device syncs: a sample of unpacked rows (the training default) has static shapes and needs none (its
    weight-0 rows, where a sequence has fewer than k supervised positions, add exactly 0). Every supervised token
    (evaluation, `layer_loss_tokens='all'`) compacts them with one `nonzero`: padding and prompt positions would
    otherwise be read out too, and those readouts are compute-bound. Packed documents add one read (how many).
    """
    if unread:
        labels = labels.masked_fill(torch.isin(labels, torch.tensor(unread, device=labels.device)), IGNORE_INDEX)
    if per_sequence is not None and position_ids is None:
        return _sample_rows(labels, per_sequence, seed, first_row)
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
        keys = row_keys(labels.shape[0], labels.shape[1] - 1, seed, first_row, labels.device).reshape(-1)[index]
        order = torch.argsort(segment * NEVER + keys)  # by document, then by key
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
        positions=index + torch.div(index, max(labels.shape[1] - 1, 1), rounding_mode="floor"),
    )
