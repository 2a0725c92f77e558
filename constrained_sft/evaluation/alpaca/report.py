"""The AlpacaEval part of a report folder: alpaca_eval.json, the win-rate plot, and its section of report.html."""

from __future__ import annotations

import html
import json
import os
from typing import Any

from ...utils import pyplot, save_figure, write_json
from ..report import img, table, write_html, write_report

ALPACA_JSON = "alpaca_eval.json"
ALPACA_PLOT = "alpaca_win_rate.png"


def plot_win_rates(alpaca: dict[str, Any], path: str) -> str:
    """Win rate (and LC win rate) of the model over the reference against gamma, +- one standard error."""
    plt = pyplot()
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
    return save_figure(fig, path)


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
        + table(["gamma", "win rate", "SE", "LC win rate", "wins", "losses", "draws", "judged", "unparsed"], rows)
        + (f"<p>No length-controlled win rate: {html.escape(note)}.</p>" if note else "")
        + (img(plot) if os.path.isfile(plot) else "")
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
        paths["html"] = write_html(os.path.join(output_dir, "report.html"), [alpaca_section(alpaca, output_dir)])
    return paths
