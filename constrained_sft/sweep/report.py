"""
A sweep's trials as rows, files and plots (`trials_summary`: `trials-<arm>.csv`, Optuna's history and importance
plots), and its report (`write_report`: `report.md`, with the comparison where there is one).
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from typing import TYPE_CHECKING

from ..evaluation.report import (
    Block,
    Document,
    Heading,
    Image,
    Preformatted,
    Table,
    Text,
    comparison_blocks,
    write_markdown,
)
from ..tasks import Arm
from ..utils.files import atomic_path
from .results import ArmTrials, SweepResults, Trial

if TYPE_CHECKING:
    from optuna import Study


def trials_summary(
    study: Study, arm: Arm, sweep_dir: str, searched: list[str], not_searched: list[str], maximize: bool = True
) -> ArmTrials:
    """Trials as rows (also `trials-<arm>.csv`), the best trial, and Optuna's history / importance plots."""
    import csv

    trials = [
        Trial(t.number, t.state.name, t.value, dict(t.params), dict(t.user_attrs))
        for t in study.get_trials(deepcopy=False)
    ]
    rows = [t.row() for t in trials]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    os.makedirs(sweep_dir, exist_ok=True)
    with atomic_path(os.path.join(sweep_dir, f"trials-{arm.name}.csv")) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    scored = [(t.value, t) for t in trials if t.state == "COMPLETE" and t.value is not None]
    best = (max if maximize else min)(scored, key=lambda pair: pair[0])[1] if scored else None
    return ArmTrials(trials, best, optuna_plots(study, arm.name, sweep_dir), searched, not_searched)


def optuna_plots(study: Study, arm: str, sweep_dir: str) -> dict[str, str]:
    """Optuna's optimisation history and parameter importances as PNGs; importances need >= 2 complete trials."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from optuna.visualization import matplotlib as ovm

    files = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
        for kind, plot in (("history", ovm.plot_optimization_history), ("importances", ovm.plot_param_importances)):
            try:
                ax = plot(study)
            except (ValueError, RuntimeError):  # too few complete trials, or a single searched value
                continue
            fig = (ax if isinstance(ax, Axes) else ax.flat[0]).figure  # an Axes, or an array of them
            if not isinstance(fig, Figure):
                raise TypeError(f"Optuna's {kind} plot is not on a figure of its own ({type(fig).__name__}).")
            path = os.path.join(sweep_dir, f"{kind}-{arm}.png")
            fig.set_size_inches(7, 4)
            fig.tight_layout()
            with atomic_path(path) as tmp:
                fig.savefig(tmp, dpi=110, format="png")
            plt.close(fig)
            files[kind] = path
    return files


def write_report(out: SweepResults, sweep_dir: str) -> str:
    """`report.md`: each arm's trials and best configuration, the plots, and the comparison with intervals."""
    settings = json.dumps({k: v for k, v in dataclasses.asdict(out.settings).items() if v is not None})
    blocks: list[Block] = [Heading("Sweep report", 1), Text("Settings:"), Preformatted(settings)]
    for arm, info in out.arms.items():
        blocks += [Heading(arm), Text(searched_line(info)), trial_table(info.trials)]
        if info.best:
            blocks.append(Text(f"Best trial {info.best.trial}: value {info.best.value:.4f}"))
        blocks += [Image(p, kind) for kind, p in info.plots.items()]
    if out.comparisons is not None:  # `compared`
        n_boot = out.settings.bootstrap_samples
        blocks += [Heading("Held-out data: constrained - ERM (paired bootstrap, 95%)")]
        blocks += comparison_blocks(out.comparisons, n_boot, level=3)
        blocks += [Image(out.arm_plot, "headline vs gamma")] if out.arm_plot else []
    return write_markdown(os.path.join(sweep_dir, "report.md"), Document("Sweep report", blocks))


def searched_line(info: ArmTrials) -> str:
    """What an arm searched, and what of its fallback section it left out because it never reads it."""
    line = f"Searched: {', '.join(info.searched)}."
    if info.not_searched:
        line += f" Not searched (the arm does not read them): {', '.join(info.not_searched)}."
    return line


def trial_table(trials: list[Trial]) -> Block:
    if not trials:
        return Text("(no trials)")
    rows = [t.row() for t in trials]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return Table(keys, [[r.get(k) for k in keys] for r in rows], number=".4g")
