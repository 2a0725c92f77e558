"""Writing the robustness results: results.json, results.csv, PNG plots and one self-contained report.html."""

from __future__ import annotations

import base64
import csv
import html
import json
import os
from typing import Any

from ..utils import atomic_path, write_json, write_text

ALPACA_JSON = "alpaca_eval.json"
ALPACA_PLOT = "alpaca_win_rate.png"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str) -> str:
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format=os.path.splitext(path)[1][1:])
    _plt().close(fig)
    return path


def plot_metric(results: dict[str, Any], path: str, key: str, ylabel: str, title: str) -> str:
    """`<key>_mean` +- `<key>_std` against gamma, one line per model; the training level dotted."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, model in results["models"].items():
        levels = model["summary"]["levels"]
        ax.errorbar(
            [r["gamma"] for r in levels],
            [r[f"{key}_mean"] for r in levels],
            yerr=[r[f"{key}_std"] for r in levels],
            marker="o",
            capsize=3,
            label=name,
        )
        ax.axvline(model["summary"]["train_gamma"], color="gray", lw=0.8, ls=":")
    ax.set(xlabel="test noise level gamma", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def plot_accuracy(results: dict[str, Any], path: str) -> str:
    return plot_metric(results, path, "accuracy", results["accuracy_label"], "Accuracy vs embedding noise")


def plot_layers(
    results: dict[str, Any], path: str, key: str = "layer_loss", ylabel: str = "held-out loss of the layer's readout"
) -> str:
    """`row[key]` (per-layer values) against the layer at each of the curve levels, one line per model."""
    plt = _plt()
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
    return _save(fig, path)


def plot_ratios(results: dict[str, Any], path: str) -> str:
    plt = _plt()
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
    return _save(fig, path)


def plot_descent(results: dict[str, Any], path: str) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, model in results["models"].items():
        levels = model["summary"]["levels"]
        ax.plot([r["gamma"] for r in levels], [r["descent_share"] for r in levels], marker="o", label=name)
    ax.set(xlabel="test noise level gamma", ylabel="share of descending layer steps", title="Per-sample descent")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def write_csv(results: dict[str, Any], path: str) -> str:
    layers = sorted(
        {layer for m in results["models"].values() for r in m["summary"]["levels"] for layer in r["layer_loss"]},
        key=int,
    )
    fields = [
        "model",
        "gamma",
        "accuracy_mean",
        "accuracy_std",
        "loss_mean",
        "loss_std",
        "descent_share",
        "ratio_mean",
        "ratio_median",
        *[f"layer_loss/{layer}" for layer in layers],
    ]
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for name, model in results["models"].items():
            for r in model["summary"]["levels"]:
                writer.writerow(
                    {
                        "model": name,
                        **{k: r[k] for k in fields[1:9]},
                        **{f"layer_loss/{k}": v for k, v in r["layer_loss"].items()},
                    }
                )
    return path


def _img(path: str) -> str:
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(os.path.basename(path))}">'


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.4f}" if isinstance(v, float) else html.escape(str(v))

    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_report(results: dict[str, Any], output_dir: str) -> dict[str, str]:
    """Every output file; returns their paths."""
    os.makedirs(output_dir, exist_ok=True)
    paths = {"json": os.path.join(output_dir, "results.json"), "csv": os.path.join(output_dir, "results.csv")}
    write_json(paths["json"], results)
    write_csv(results, paths["csv"])
    plots = {
        "accuracy": plot_accuracy(results, os.path.join(output_dir, "accuracy_vs_gamma.png")),
        "layers": plot_layers(results, os.path.join(output_dir, "layer_losses.png")),
        "ratios": plot_ratios(results, os.path.join(output_dir, "layer_ratios.png")),
        "descent": plot_descent(results, os.path.join(output_dir, "descent_vs_gamma.png")),
    }
    paths.update(plots)
    summary_rows = [
        [
            name,
            m["summary"]["auc"],
            m["summary"]["id_accuracy"],
            m["summary"]["ood_accuracy"],
            m["summary"]["descent_share"],
            m["summary"]["train_gamma"],
        ]
        for name, m in results["models"].items()
    ]
    sections = [
        f"<h1>Robustness report</h1><p>{html.escape(results['settings']['description'])}</p>",
        _table(["model", "AUC", "ID accuracy", "OOD accuracy", "descent share", "train gamma"], summary_rows),
    ]
    if results.get("differences"):
        d = results["differences"]
        sections.append(
            f"<h2>{html.escape(d['label'])}</h2>"
            + _table(
                ["AUC", "ID accuracy", "OOD accuracy", "descent share"],
                [[d["auc"], d["id_accuracy"], d["ood_accuracy"], d["descent_share"]]],
            )
        )
    for name, model in results["models"].items():
        rows = [
            [r["gamma"], r["accuracy_mean"], r["accuracy_std"], r["loss_mean"], r["descent_share"], r["ratio_median"]]
            for r in model["summary"]["levels"]
        ]
        sections.append(
            f"<h2>{html.escape(name)}</h2><p>{html.escape(model['path'])}</p>"
            + _table(["gamma", "accuracy", "std", "loss", "descent share", "median ratio"], rows)
        )
    sections.append("<h2>Plots</h2>" + "".join(_img(p) for p in plots.values()))
    alpaca_json = os.path.join(output_dir, ALPACA_JSON)
    if os.path.isfile(alpaca_json):  # written by `eval alpaca`; kept when the robustness part is rerun
        with open(alpaca_json) as f:
            sections.append(alpaca_section(json.load(f), output_dir))
    sections.append(
        f"<h2>Settings</h2><pre>{html.escape(str(results['settings']))}\n{html.escape(str(results['versions']))}</pre>"
    )
    paths["html"] = _write_html(os.path.join(output_dir, "report.html"), sections)
    return paths


def _write_html(path: str, sections: list[str]) -> str:
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}img{max-width:100%;margin:0.5em 0}"
    )
    write_text(
        path,
        f"<!doctype html><html><head><meta charset='utf-8'><title>Robustness report</title><style>{style}</style>"
        f"</head><body>{''.join(sections)}</body></html>",
    )
    return path


def plot_win_rates(alpaca: dict[str, Any], path: str) -> str:
    """Win rate (and LC win rate) of the model over the reference against gamma, +- one standard error."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = alpaca["levels"]
    gammas = [r["gamma"] for r in rows]
    ax.errorbar(gammas, [r["win_rate"] for r in rows], yerr=[r["standard_error"] for r in rows], marker="o",
                capsize=3, label="win rate")  # fmt: skip
    if any(r["lc_win_rate"] is not None for r in rows):
        ax.plot(gammas, [r["lc_win_rate"] for r in rows], marker="s", label="length-controlled win rate")
    ax.axhline(50, color="grey", linestyle="--", linewidth=1)
    ax.set(xlabel="embedding noise gamma", ylabel="win rate (%)", ylim=(0, 100))
    ax.set_title(f"{alpaca['model']} vs {alpaca['reference']} (judge: {alpaca['judge_config']})")
    ax.legend()
    return _save(fig, path)


def alpaca_section(alpaca: dict[str, Any], output_dir: str) -> str:
    rows = [
        [r["gamma"], r["win_rate"], r["standard_error"], "-" if r["lc_win_rate"] is None else r["lc_win_rate"],
         r["n_wins"], r["n_wins_base"], r["n_draws"], r["n_total"], r["unparsed"]]
        for r in alpaca["levels"]
    ]  # fmt: skip
    note = alpaca.get("lc_missing_reason")
    plot = os.path.join(output_dir, ALPACA_PLOT)
    return (
        f"<h2>AlpacaEval: {html.escape(alpaca['model'])} vs {html.escape(alpaca['reference'])}</h2>"
        f"<p>judge: {html.escape(alpaca['judge_config'])}; win rates in percent, draws count half.</p>"
        + _table(["gamma", "win rate", "SE", "LC win rate", "wins", "losses", "draws", "judged", "unparsed"], rows)
        + (f"<p>No length-controlled win rate: {html.escape(note)}.</p>" if note else "")
        + (_img(plot) if os.path.isfile(plot) else "")
    )


def write_alpaca(alpaca: dict[str, Any], output_dir: str) -> dict[str, str]:
    """alpaca_eval.json and its plot, then report.html again (with the robustness results if the folder has them)."""
    os.makedirs(output_dir, exist_ok=True)
    paths = {"json": os.path.join(output_dir, ALPACA_JSON), "plot": os.path.join(output_dir, ALPACA_PLOT)}
    write_json(paths["json"], {**alpaca, "files": paths})
    plot_win_rates(alpaca, paths["plot"])
    results = os.path.join(output_dir, "results.json")
    if os.path.isfile(results):
        with open(results) as f:
            paths["html"] = write_report(json.load(f), output_dir)["html"]
    else:
        paths["html"] = _write_html(os.path.join(output_dir, "report.html"), [alpaca_section(alpaca, output_dir)])
    return paths
