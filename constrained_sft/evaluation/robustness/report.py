"""Writing a robustness evaluation, for every task: results.json, results.csv, PNG plots (the headline per arm with its
interval band, each comparison's difference with its band) and its part of the folder's report.html (`report.page`);
the models' summary table, which sweeps and studies show too."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence

from ...tasks import Headline
from ...utils.files import atomic_path
from ..report import (
    PARTS,
    Block,
    Heading,
    Image,
    PagePart,
    Preformatted,
    Table,
    Text,
    comparison_blocks,
    write_page,
)
from .plots import plot_descent, plot_differences, plot_layers, plot_metric, plot_ratios
from .results import ModelSummary, ReportFiles, RobustnessFolder, RobustnessResults

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
                values = {
                    f"{key}_mean": r.metric_mean,
                    f"{key}_std": r.metric_std,
                    **{k: getattr(r, k) for k in LEVEL_FIELDS},
                }
                writer.writerow({"kind": "level", "model": name, "gamma": r.gamma, **values, **layer_values})
        for name, comparison in results.comparisons.items():
            for stat, row in comparison.rows.items():
                gamma = stat.split("@")[1] if "@" in stat else ""
                writer.writerow(
                    {
                        "kind": "difference",
                        "model": name,
                        "gamma": gamma,
                        "statistic": stat,
                        "value_a": row.value_a,
                        "value_b": row.value_b,
                        **row.difference.to_dict(),
                    }
                )
    return path


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


def robustness_blocks(results: RobustnessResults, images: Sequence[str]) -> list[Block]:
    """The report's content: summary, comparisons, each model's levels, the plots, the settings."""
    key = results.headline.key
    blocks: list[Block] = [
        Heading("Robustness report", 1),
        Text(results.settings.description),
        summary_table(results.headline, results.summaries),
        *comparison_blocks(results.comparisons, results.settings.bootstrap_samples),
    ]
    for name, model in results.models.items():
        rows = [
            [r.gamma, r.metric_mean, r.metric_std, r.loss_mean, r.descent_share, r.ratio_median]
            for r in model.summary.levels
        ]
        blocks += [
            Heading(name),
            Text(f"{model.path} ({model.architecture})"),
            Table(["gamma", key, "std over noise seeds", "loss", "descent share", "median ratio"], rows),
        ]
    blocks += [Heading("Plots"), *(Image(p) for p in images)]
    blocks += [Heading("Settings"), Preformatted(f"{results.settings.to_dict()}\n{results.versions}")]
    return blocks


def write_report(results: RobustnessResults, output_dir: str, figures: dict[str, str] | None = None) -> ReportFiles:
    """Every output file, then the folder's report.html (with the other evaluations' parts the folder holds); returns
    their paths (also set as `results.files`). `figures`: a task's extra figures (kept when the page is rewritten)."""
    os.makedirs(output_dir, exist_ok=True)
    key = results.headline.key
    if figures is None:  # the ones the folder's results carry (a dict of name -> path, or none)
        kept = results.files.get("figures")
        figures = kept if isinstance(kept, dict) else {}
    folder = RobustnessFolder(output_dir)
    csv = folder.results_csv
    paths: ReportFiles = {"json": folder.results_json, "csv": csv}
    plots = {key: plot_metric(results, folder.figure(f"{key}_vs_gamma"))}
    if results.comparisons:
        plots["differences"] = plot_differences(results, folder.figure("difference_vs_gamma"))
    plots["layers"] = plot_layers(results, folder.figure("layer_losses"))
    plots["ratios"] = plot_ratios(results, folder.figure("layer_ratios"))
    plots["descent"] = plot_descent(results, folder.figure("descent_vs_gamma"))
    paths.update(plots)
    paths["figures"] = figures
    paths["html"] = folder.page
    write_csv(results, csv)
    results.files = paths
    results.save(output_dir)
    write_page(output_dir)
    return paths


@PARTS.register
class RobustnessPart(PagePart):
    """A robustness evaluation's part of a report folder: first on the page, which it names."""

    name, title, position = "robustness", "Robustness report", 0

    @classmethod
    def blocks(cls, output_dir: str) -> list[Block]:
        results = RobustnessResults.load(output_dir)
        if results is None:
            return []
        files = results.files  # the plots by name, then the task's figures (`write_report`'s order)
        plots = [path for path in files.values() if isinstance(path, str) and path.endswith(".png")]
        figures = files.get("figures", {})
        return robustness_blocks(results, [*plots, *(figures.values() if isinstance(figures, dict) else ())])
