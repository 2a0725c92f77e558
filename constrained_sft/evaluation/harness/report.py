"""`eval harness`'s report: per task and metric, each arm against gamma with its band; the comparisons' tables."""

from __future__ import annotations

import os

from ...utils.figures import pyplot, save_figure
from ..report import Block, Document, Heading, Image, Table, Text, comparison_blocks, write_markdown
from .results import HarnessResults


def plot_task(results: HarnessResults, key: str, path: str) -> str:
    """One lm-eval metric (`task/metric`) against gamma, one line per arm with its 95% bootstrap band."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    gammas = results.settings.gammas.to_list()
    for arm, bands in results.bands.items():
        band = bands[key]
        (line,) = ax.plot(gammas, band.value, marker="o", label=f"{arm} ({len(results.arms[arm])} model(s))")
        ax.fill_between(gammas, band.low, band.high, color=line.get_color(), alpha=0.2)
    ax.set(xlabel="noise level gamma", ylabel=key, title="band: 95% bootstrap interval")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def write_harness_report(results: HarnessResults, folder: str) -> dict[str, str]:
    """report.md and one PNG per task metric in `folder`; returns their paths."""
    settings = results.settings
    gammas = settings.gammas.to_list()
    files = {}
    blocks: list[Block] = [
        Heading("Noisy lm-eval: the models' scores against the noise level", 1),
        Text(
            f"Tasks {settings.tasks} through lm-evaluation-harness at gamma {gammas}, {settings.noise_seeds} noise "
            f"seed(s), sigma_x {settings.sigma_x:.4g} ({settings.sigma_x_source}); limit {settings.limit}, few-shot "
            f"{settings.num_fewshot}, chat template {settings.apply_chat_template}. Cells took "
            f"{results.cell_seconds} s in all."
        ),
        Heading("Models"),
        Table(
            ["model", "task / metric", *[f"gamma {g:g}" for g in gammas]],
            [
                [m, f"{t}/{metric}", *values]
                for m, tasks in results.models.items()
                for t, metrics in tasks.items()
                for metric, values in metrics.items()
            ],
        ),
    ]
    for key in results.metrics:
        name = key.replace("/", "-").replace(",", "-") + ".png"
        files[key] = plot_task(results, key, os.path.join(folder, name))
        blocks.append(Image(files[key], key))
    blocks += comparison_blocks(results.comparisons, settings.bootstrap_samples)
    files["markdown"] = write_markdown(os.path.join(folder, "report.md"), Document("Noisy lm-eval", blocks))
    return files
