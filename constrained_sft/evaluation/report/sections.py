"""Report content more than one report shows, as blocks: the comparisons with their intervals, the models' summary."""

from __future__ import annotations

from ...tasks import Headline
from ..results import Comparison, ModelSummary
from .document import Block, Heading, Table, Text


def comparison_table(comparison: Comparison) -> Table:
    """One row per statistic: each arm's value, A - B with its interval, the verdict."""
    rows = [
        [comparison.name, stat, r.value_a, r.value_b,
         f"{r.difference.estimate:+.4f} [{r.difference.low:+.4f}, {r.difference.high:+.4f}]", r.difference.verdict]
        for stat, r in comparison.rows.items()
    ]  # fmt: skip
    return Table(["comparison", "statistic", comparison.a, comparison.b, "A - B [95% CI]", "verdict"], rows)


def comparison_blocks(comparisons: dict[str, Comparison], bootstrap_samples: int, level: int = 2) -> list[Block]:
    """Each comparison under its own heading, with how its intervals were made."""
    note = (
        f"95% paired bootstrap over training seeds and held-out units ({bootstrap_samples} resamples); the verdict is "
        "better / worse only when the whole interval is on one side of 0."
    )
    out: list[Block] = []
    for comparison in comparisons.values():
        out += [Heading(comparison.name, level), Text(note), comparison_table(comparison)]
    return out


def summary_table(headline: Headline, summaries: dict[str, ModelSummary], train_gamma: bool = True) -> Table:
    """One row per model: the headline's AUC, ID and OOD means, the descent share (and the training level)."""
    key = headline.key
    headers = ["model", f"AUC ({key})", f"ID {key}", f"OOD {key}", "descent share"]
    rows = []
    for name, s in summaries.items():
        rows.append([name, s.auc, s.id_metric, s.ood_metric, s.descent_share])
        if train_gamma:
            rows[-1].append(s.train_gamma)
    return Table([*headers, "train gamma"] if train_gamma else headers, rows)
