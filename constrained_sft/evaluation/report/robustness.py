"""Writing a robustness evaluation, for every task: results.json, results.csv, PNG plots (the headline per arm with its
interval band, each comparison's difference with its band) and one self-contained report.html."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence

from ...utils.files import atomic_path
from ..results import RESULTS_JSON, ReportFiles, RobustnessResults
from .document import Block, Document, Heading, Image, Preformatted, Table, Text
from .html import write_html
from .plots import plot_descent, plot_differences, plot_layers, plot_metric, plot_ratios
from .sections import comparison_blocks, summary_table

LEVEL_FIELDS = ("loss_mean", "loss_std", "descent_share", "ratio_mean", "ratio_median")


def write_csv(results: RobustnessResults, path: str) -> str:
    """One `level` row per (model, gamma) and one `difference` row per (comparison, statistic)."""
    key, layer_key = results.headline.key, results.layer_curve[0]
    levels = {name: m.summary.levels for name, m in results.models.items()}
    layers = sorted({layer for rows in levels.values() for r in rows for layer in r.curves[layer_key]}, key=int)
    level_fields = [f"{key}_mean", f"{key}_std", *LEVEL_FIELDS]
    fields = ["kind", "model", "gamma", *level_fields, *[f"{layer_key}/{x}" for x in layers]]
    fields += ["statistic", "value_a", "value_b", "estimate", "low", "high", "confidence", "verdict"]
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        for name, rows in levels.items():
            for r in rows:
                layer_values = {f"{layer_key}/{x}": v for x, v in r.curves[layer_key].items()}
                values = {f"{key}_mean": r.metric_mean, f"{key}_std": r.metric_std,
                          **{k: getattr(r, k) for k in LEVEL_FIELDS}}  # fmt: skip
                writer.writerow({"kind": "level", "model": name, "gamma": r.gamma, **values, **layer_values})
        for name, comparison in results.comparisons.items():
            for stat, row in comparison.rows.items():
                gamma = stat.split("@")[1] if "@" in stat else ""
                writer.writerow({"kind": "difference", "model": name, "gamma": gamma, "statistic": stat,
                                 "value_a": row.value_a, "value_b": row.value_b,
                                 **row.difference.to_dict()})  # fmt: skip
    return path


def robustness_blocks(results: RobustnessResults, images: Sequence[str], more: Sequence[Block] = ()) -> list[Block]:
    """The report's content: summary, comparisons, each model's levels, the plots, `more` (other parts of the
    folder), the settings."""
    key = results.headline.key
    blocks: list[Block] = [
        Heading("Robustness report", 1),
        Text(results.settings.description),
        summary_table(results.headline, results.summaries),
        *comparison_blocks(results.comparisons, results.settings.bootstrap_samples),
    ]
    for name, model in results.models.items():
        rows = [[r.gamma, r.metric_mean, r.metric_std, r.loss_mean, r.descent_share, r.ratio_median]
                for r in model.summary.levels]  # fmt: skip
        blocks += [
            Heading(name),
            Text(f"{model.path} ({model.architecture})"),
            Table(["gamma", key, "std over noise seeds", "loss", "descent share", "median ratio"], rows),
        ]
    blocks += [Heading("Plots"), *(Image(p) for p in images), *more]
    blocks += [Heading("Settings"), Preformatted(f"{results.settings.to_dict()}\n{results.versions}")]
    return blocks


def write_report(
    results: RobustnessResults,
    output_dir: str,
    figures: dict[str, str] | None = None,
    more_sections: Sequence[Block] = (),
) -> ReportFiles:
    """Every output file; returns their paths (also set as `results.files`). `figures`: a task's extra figures (kept
    when the page is rewritten); `more_sections`: blocks other parts of the folder contribute (the AlpacaEval
    head-to-head, `report.headtohead.folder_sections`), placed before the settings."""
    os.makedirs(output_dir, exist_ok=True)
    key = results.headline.key
    figures = figures if figures is not None else results.files.get("figures", {})
    paths: ReportFiles = {
        "json": os.path.join(output_dir, RESULTS_JSON),
        "csv": os.path.join(output_dir, "results.csv"),
    }
    plots = {key: plot_metric(results, os.path.join(output_dir, f"{key}_vs_gamma.png"))}
    if results.comparisons:
        plots["differences"] = plot_differences(results, os.path.join(output_dir, "difference_vs_gamma.png"))
    plots["layers"] = plot_layers(results, os.path.join(output_dir, "layer_losses.png"))
    plots["ratios"] = plot_ratios(results, os.path.join(output_dir, "layer_ratios.png"))
    plots["descent"] = plot_descent(results, os.path.join(output_dir, "descent_vs_gamma.png"))
    paths.update(plots)
    paths["figures"] = figures
    write_csv(results, paths["csv"])
    blocks = robustness_blocks(results, [*plots.values(), *figures.values()], more_sections)
    paths["html"] = write_html(os.path.join(output_dir, "report.html"), Document("Robustness report", blocks))
    results.files = paths
    results.save(output_dir)
    return paths
