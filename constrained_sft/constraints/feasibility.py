"""
The feasibility report written as `constraints.json` at the end of training: per-layer losses, multipliers and mean
slack over the last optimizer steps of the run, and which constraints hold there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .lagrangian import DescentConstraints


def window_means(rows: Sequence[dict[str, Any]], key: str) -> list[float]:
    """Mean of the per-step vectors `row[key]` over the window, elementwise; empty without rows."""
    return torch.tensor([r[key] for r in rows], dtype=torch.float64).mean(0).tolist() if rows else []


def feasibility_report(
    spec: DescentConstraints,
    rows: Sequence[dict[str, Any]],
    dual: list[float],
    enabled: bool,
    skipped_dual_steps: int,
) -> dict[str, Any]:
    """
    Feasibility over the recorded window `rows` (one per optimizer step, as `PrimalDual.step` records them): a
    constraint holds if its mean slack there is <= 0. `dual` is the current multiplier of each constraint.
    """
    layer_loss, slack_mean = window_means(rows, "layer_loss"), window_means(rows, "slack")
    holds = [s <= 0 for s in slack_mean]
    fractions = [r["descent_fraction"] for r in rows if r["descent_fraction"] is not None]
    return {
        "constraints": enabled,
        "layers": list(spec.layers),
        "alpha": list(spec.alphas),
        "epsilon": spec.epsilon,
        "window_steps": [rows[0]["step"], rows[-1]["step"]] if rows else None,
        "layer_loss": dict(zip(map(str, spec.layers), layer_loss, strict=False)),
        "dual": dict(zip(map(str, spec.keys), dual, strict=True)),
        "slack": dict(zip(map(str, spec.keys), slack_mean, strict=False)),
        "holds": dict(zip(map(str, spec.keys), holds, strict=False)),
        "feasible": bool(rows) and all(holds),
        "descent_fraction": (sum(fractions) / len(fractions)) if fractions else None,
        "skipped_dual_steps": skipped_dual_steps,
    }
