"""Writing a robustness evaluation, for every task: results.json, results.csv, PNG plots (the headline per arm with its
interval band, each comparison's difference with its band) and one self-contained report.html."""

from __future__ import annotations

import base64
import csv
import html
import os
from collections.abc import Sequence
from typing import Any

from ..utils import atomic_path, pyplot, save_figure, write_json, write_text

VERDICT_COLOURS = {"better": "#d7f0d7", "worse": "#f6d5d5", "same": "#eeeeee"}


def plot_metric(results: dict[str, Any], path: str) -> str:
    """The headline against gamma, one line per arm (pooled over its seeds) with its 95% bootstrap band."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    gammas = results["settings"]["gammas"]
    for arm, band in results["bands"].items():
        (line,) = ax.plot(gammas, band["value"], marker="o", label=f"{arm} ({len(results['arms'][arm])} model(s))")
        ax.fill_between(gammas, band["low"], band["high"], color=line.get_color(), alpha=0.2)
    ax.axvline(results["settings"]["train_gamma"], color="gray", lw=0.8, ls=":")
    ax.set(xlabel="test noise level gamma", ylabel=results["headline"]["label"], title="band: 95% bootstrap interval")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def plot_differences(results: dict[str, Any], path: str) -> str:
    """Each comparison's headline difference A - B against gamma with its 95% paired interval; 0 dashed."""
    plt = pyplot()
    key, gammas = results["headline"]["key"], results["settings"]["gammas"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for pair, stats in results["comparisons"].items():
        rows = [stats[f"{key}@{g:g}"]["difference"] for g in gammas]
        (line,) = ax.plot(gammas, [r["estimate"] for r in rows], marker="o", label=pair)
        ax.fill_between(gammas, [r["low"] for r in rows], [r["high"] for r in rows], color=line.get_color(), alpha=0.2)
    ax.axhline(0.0, color="black", lw=0.8, ls="--")
    ax.axvline(results["settings"]["train_gamma"], color="gray", lw=0.8, ls=":")
    better = "above" if results["headline"]["higher_is_better"] else "below"
    ax.set(
        xlabel="test noise level gamma",
        ylabel=f"difference in {key}",
        title=f"A - B, 95% interval ({better} 0: A better)",
    )
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def plot_layers(results: dict[str, Any], path: str, key: str, ylabel: str) -> str:
    """`row[key]` (per-layer values) against the layer at each of the curve levels, one line per model."""
    plt = pyplot()
    gammas = results["settings"]["curve_gammas"]
    fig, axes = plt.subplots(1, len(gammas), figsize=(4.5 * len(gammas), 3.8), squeeze=False)
    for ax, gamma in zip(axes[0], gammas, strict=True):
        for name, model in results["models"].items():
            row = next(r for r in model["summary"]["levels"] if r["gamma"] == gamma)
            layers = sorted(row[key], key=int)
            ax.plot([int(x) for x in layers], [row[key][x] for x in layers], marker=".", label=name)
        ax.set(xlabel="layer", ylabel=ylabel, title=f"gamma = {gamma:g}")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    return save_figure(fig, path)


def plot_ratios(results: dict[str, Any], path: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    gamma = results["settings"]["curve_gammas"][0]
    for name, model in results["models"].items():
        row = next(r for r in model["summary"]["levels"] if r["gamma"] == gamma)
        edges, counts = row["ratio_histogram"]["edges"], row["ratio_histogram"]["counts"]
        total = max(sum(counts), 1)
        ax.stairs([c / total for c in counts], edges, label=f"{name} (median {row['ratio_median']:.2f})", fill=False)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set(
        xlabel="per-sample layer ratio f_l / f_(l-1) (clipped at 2)",
        ylabel="share of steps",
        title=f"Layer steps at gamma = {gamma:g} (left of 1: descent)",
    )
    ax.legend()
    return save_figure(fig, path)


def plot_descent(results: dict[str, Any], path: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, model in results["models"].items():
        levels = model["summary"]["levels"]
        ax.plot([r["gamma"] for r in levels], [r["descent_share"] for r in levels], marker="o", label=name)
    ax.set(xlabel="test noise level gamma", ylabel="share of descending layer steps", title="Per-sample descent")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def write_csv(results: dict[str, Any], path: str) -> str:
    """One `level` row per (model, gamma) and one `difference` row per (comparison, statistic)."""
    key, layer_key = results["headline"]["key"], results["layer_curve"]["key"]
    layers = sorted(
        {layer for m in results["models"].values() for r in m["summary"]["levels"] for layer in r[layer_key]}, key=int
    )
    level_fields = [
        f"{key}_mean",
        f"{key}_std",
        "loss_mean",
        "loss_std",
        "descent_share",
        "ratio_mean",
        "ratio_median",
    ]
    fields = ["kind", "model", "gamma", *level_fields, *[f"{layer_key}/{x}" for x in layers]]
    fields += ["statistic", "value_a", "value_b", "estimate", "low", "high", "confidence", "verdict"]
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        for name, model in results["models"].items():
            for r in model["summary"]["levels"]:
                layer_values = {f"{layer_key}/{x}": v for x, v in r[layer_key].items()}
                writer.writerow(
                    {
                        "kind": "level",
                        "model": name,
                        "gamma": r["gamma"],
                        **{k: r[k] for k in level_fields},
                        **layer_values,
                    }
                )
        for pair, stats in results["comparisons"].items():
            a, b = pair.split(" - ")
            for stat, row in stats.items():
                gamma = stat.split("@")[1] if "@" in stat else ""
                writer.writerow({"kind": "difference", "model": pair, "gamma": gamma, "statistic": stat,
                                 "value_a": row[a], "value_b": row[b], **row["difference"]})  # fmt: skip
    return path


def img(path: str) -> str:
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(os.path.basename(path))}">'


def table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, str) and v in VERDICT_COLOURS:
            return f'<td style="background:{VERDICT_COLOURS[v]}">{v}</td>'
        return f"<td>{v:.4f}</td>" if isinstance(v, float) else f"<td>{html.escape(str(v))}</td>"

    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_html(path: str, sections: list[str], title: str = "Robustness report") -> str:
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}img{max-width:100%;margin:0.5em 0}"
        "pre{white-space:pre-wrap;word-break:break-all}"
    )
    write_text(
        path,
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{style}</style>"
        f"</head><body>{''.join(sections)}</body></html>",
    )
    return path


def comparison_sections(results: dict[str, Any]) -> list[str]:
    out = []
    for pair, stats in results["comparisons"].items():
        a, b = pair.split(" - ")
        rows = [[stat, row[a], row[b], row["difference"]["estimate"], row["difference"]["low"],
                 row["difference"]["high"], row["difference"]["verdict"]] for stat, row in stats.items()]  # fmt: skip
        out.append(
            f"<h2>{html.escape(pair)}</h2><p>95% paired bootstrap over training seeds and held-out units "
            f"({results['settings']['bootstrap_samples']} resamples); the verdict is better / worse only when the whole "
            f"interval is on one side of 0.</p>"
            + table(["statistic", a, b, "difference", "low", "high", "verdict"], rows)
        )
    return out


def write_report(
    results: dict[str, Any],
    output_dir: str,
    figures: dict[str, str] | None = None,
    more_sections: Sequence[str] = (),
) -> dict[str, str]:
    """Every output file; returns their paths. `figures`: a task's extra figures (kept when the page is rewritten);
    `more_sections`: HTML sections other parts of the folder contribute (the AlpacaEval head-to-head,
    `alpaca.report.folder_sections`), placed before the settings."""
    os.makedirs(output_dir, exist_ok=True)
    key = results["headline"]["key"]
    layer_key, layer_label = results["layer_curve"]["key"], results["layer_curve"]["label"]
    figures = figures if figures is not None else results.get("files", {}).get("figures", {})
    paths = {"json": os.path.join(output_dir, "results.json"), "csv": os.path.join(output_dir, "results.csv")}
    plots = {key: plot_metric(results, os.path.join(output_dir, f"{key}_vs_gamma.png"))}
    if results["comparisons"]:
        plots["differences"] = plot_differences(results, os.path.join(output_dir, "difference_vs_gamma.png"))
    plots["layers"] = plot_layers(results, os.path.join(output_dir, "layer_losses.png"), layer_key, layer_label)
    plots["ratios"] = plot_ratios(results, os.path.join(output_dir, "layer_ratios.png"))
    plots["descent"] = plot_descent(results, os.path.join(output_dir, "descent_vs_gamma.png"))
    paths.update(plots)
    paths["figures"] = figures
    write_csv(results, paths["csv"])
    summary_rows = [[name, m["summary"]["auc"], m["summary"][f"id_{key}"], m["summary"][f"ood_{key}"],
                     m["summary"]["descent_share"], m["summary"]["train_gamma"]]
                    for name, m in results["models"].items()]  # fmt: skip
    sections = [
        f"<h1>Robustness report</h1><p>{html.escape(results['settings']['description'])}</p>",
        table(["model", f"AUC ({key})", f"ID {key}", f"OOD {key}", "descent share", "train gamma"], summary_rows),
        *comparison_sections(results),
    ]
    for name, model in results["models"].items():
        rows = [[r["gamma"], r[f"{key}_mean"], r[f"{key}_std"], r["loss_mean"], r["descent_share"], r["ratio_median"]]
                for r in model["summary"]["levels"]]  # fmt: skip
        sections.append(
            f"<h2>{html.escape(name)}</h2><p>{html.escape(model['path'])} ({html.escape(model['architecture'])})</p>"
            + table(["gamma", key, "std over noise seeds", "loss", "descent share", "median ratio"], rows)
        )
    sections.append("<h2>Plots</h2>" + "".join(img(p) for p in [*plots.values(), *figures.values()]))
    sections.extend(more_sections)
    sections.append(
        f"<h2>Settings</h2><pre>{html.escape(str(results['settings']))}\n{html.escape(str(results['versions']))}</pre>"
    )
    paths["html"] = write_html(os.path.join(output_dir, "report.html"), sections)
    write_json(paths["json"], {**results, "files": paths})
    return paths
