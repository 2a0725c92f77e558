"""
The per-layer losses of one batch (what a readout hands to the constrained problem) and their running statistics:
token-weighted layer losses, descending steps, and the public metric keys computed from them.

Shapes: n measured layers, S sequences (documents; for classifiers, examples).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .lagrangian import DescentConstraints, constraint_values

Reduce = Callable[[torch.Tensor], torch.Tensor]  # sum over data-parallel ranks


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


def descent_counts(losses: LayerLosses) -> tuple[torch.Tensor, torch.Tensor]:
    """(descending steps, all steps) over (sequence, consecutive measured layers) with f_l < f_{l-1}."""
    valid = losses.segment_tokens.gt(0)  # [S]; masked, not indexed: no data-dependent shape, no device sync
    per_seq = losses.per_sequence
    steps = (per_seq[1:] < per_seq[:-1]) & valid  # [n-1, S]
    return steps.sum(), valid.sum() * (per_seq.size(0) - 1)


@dataclass(frozen=True)
class LayerTotals:
    """What `LayerStats` accumulates over batches (and ranks), read on the host, by field."""

    sums: tuple[float, ...]  # [n] token-weighted layer loss sums
    tokens: float  # supervised tokens (examples, for classifiers and denoisers)
    descended: float  # (sequence, consecutive measured layers) steps with f_l < f_{l-1}
    steps: float  # all such steps

    @classmethod
    def unpack(cls, values: Sequence[float]) -> LayerTotals:
        """From `LayerStats`' packed `[n + 3]` values (`tolist()` of its totals)."""
        *sums, tokens, descended, steps = values
        return cls(tuple(sums), tokens, descended, steps)


class LayerStats:
    """
    Running `LayerTotals`, detached, float64, kept packed in one `[n + 3]` tensor (the fields in order: sums, tokens,
    descended, steps) so that a step costs one all-reduce and one device -> host copy; `LayerTotals.unpack` reads it.
    """

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.totals: torch.Tensor | None = None

    def add(self, losses: LayerLosses, reduce: Reduce | None = None) -> None:
        """Add one batch; with `reduce`, its totals are first summed over ranks (a collective call)."""
        descended, steps = descent_counts(losses)
        counts = torch.stack([losses.num_tokens, descended, steps]).to(losses.sums.device)  # [3] integers
        row = torch.cat([losses.sums.detach().double(), counts])  # cat promotes the counts to float64
        row = reduce(row) if reduce is not None else row
        self.totals = row if self.totals is None else self.totals + row.to(self.totals.device)

    def pop(self, reduce: Reduce) -> torch.Tensor:
        """The packed totals summed over ranks (every rank must call this), then reset. Zeros when nothing was added."""
        totals = self.totals if self.totals is not None else torch.zeros(self.num_layers + 3, dtype=torch.float64)
        self.totals = None
        return reduce(totals)

    def pop_totals(self, reduce: Reduce) -> LayerTotals:
        """`pop`, read on the host (one device -> host copy)."""
        return LayerTotals.unpack(self.pop(reduce).tolist())


@dataclass(frozen=True)
class StepStats:
    """The reduced statistics of one optimizer step (or one evaluation): what the dual step and the feasibility window
    read, by field; `metrics()` is their public log form."""

    layer_loss: tuple[float, ...]  # f_l of each measured layer
    slack: tuple[float, ...]  # g_c of each constraint (positive = violated), in `spec.keys` order
    descent_fraction: float | None  # share of (sequence, consecutive layers) steps that descend; None without steps

    @property
    def feasible_fraction(self) -> float | None:
        return sum(v <= 0 for v in self.slack) / len(self.slack) if self.slack else None

    def metrics(self, spec: DescentConstraints) -> dict[str, float]:
        """Public metric keys: `layer_loss/<l>`, `slack/<l>` (lined up with `dual/<l>`), the two fractions."""
        out = {f"layer_loss/{layer}": v for layer, v in zip(spec.layers, self.layer_loss, strict=True)}
        out.update({f"slack/{key}": v for key, v in zip(spec.keys, self.slack, strict=True)})
        if self.descent_fraction is not None:
            out["descent_fraction"] = self.descent_fraction
        if self.feasible_fraction is not None:
            out["feasible_fraction"] = self.feasible_fraction
        return out


def step_stats(spec: DescentConstraints, totals: LayerTotals) -> StepStats | None:
    """The statistics of reduced totals; None when no supervised token was seen."""
    if totals.tokens <= 0:
        return None
    return StepStats(
        layer_loss=tuple(s / totals.tokens for s in totals.sums),
        slack=tuple(constraint_values(spec, totals.sums, totals.tokens)),
        descent_fraction=totals.descended / totals.steps if totals.steps > 0 else None,
    )


def stats_metrics(spec: DescentConstraints, totals: LayerTotals) -> dict[str, float]:
    """`step_stats(...).metrics(spec)`, or empty when no supervised token was seen."""
    stats = step_stats(spec, totals)
    return {} if stats is None else stats.metrics(spec)
