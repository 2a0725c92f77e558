"""Report content more than one evaluation shows, as blocks: the comparisons between arms with their intervals."""

from __future__ import annotations

from ..comparisons import Comparison
from .document import Block, Heading, Table, Text


def comparison_table(comparison: Comparison) -> Table:
    """One row per statistic: each arm's value, A - B with its interval, the verdict."""
    rows = [
        [
            comparison.name,
            stat,
            r.value_a,
            r.value_b,
            f"{r.difference.estimate:+.4f} [{r.difference.low:+.4f}, {r.difference.high:+.4f}]",
            r.difference.verdict,
        ]
        for stat, r in comparison.rows.items()
    ]
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
