"""The AlpacaEval part of a report folder: alpaca_eval.json, the win-rate plot, and its section of report.html."""

from __future__ import annotations

import json
import os
import textwrap
from typing import Any

from ...utils.figures import pyplot, save_figure
from ...utils.files import write_json
from ..report import Block, Document, Heading, Image, Table, Text, write_html, write_report
from ..results import RobustnessResults

ALPACA_JSON = "alpaca_eval.json"
ALPACA_PLOT = "alpaca_win_rate.png"


def judge_label(alpaca: dict[str, Any]) -> str:
    """The judge's name, marked as a proxy where it is one."""
    proxy = " - PROXY, not a quality judge" if alpaca.get("judge_is_proxy") else ""
    return f"{alpaca['judge_config']}{proxy}"


def plot_win_rates(alpaca: dict[str, Any], path: str) -> str:
    """Win rate (and LC win rate) of the model over the reference against gamma, with the 95% bootstrap interval."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = [r for r in alpaca["levels"] if r["win_rate"] is not None]
    gammas = [r["gamma"] for r in rows]
    ax.plot(gammas, [r["win_rate"] for r in rows], marker="o", label="win rate (both orders, draws half)")
    ax.fill_between(gammas, [r["low"] for r in rows], [r["high"] for r in rows], alpha=0.2, label="95% interval")
    if any(r["lc_win_rate"] is not None for r in rows):
        ax.plot(gammas, [r["lc_win_rate"] for r in rows], marker="s", label="length-controlled win rate")
    ax.axhline(50, color="grey", linestyle="--", linewidth=1)
    ax.set(xlabel="embedding noise gamma", ylabel="win rate (%)", ylim=(0, 100))
    judge = "\n".join(textwrap.wrap(f"judge: {judge_label(alpaca)}", 80))  # a long proxy label: wrapped, not cut
    ax.set_title(f"{alpaca['model']} vs {alpaca['reference']}\n{judge}", fontsize=9)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def level_table(alpaca: dict[str, Any]) -> Table:
    """The win-rate table, one row per level, shared by every report that shows a head-to-head."""
    headers = ["gamma", "win rate %", "low", "high", "order agreement", "first-position rate", "LC win rate", "wins",
               "losses", "draws", "verdicts", "unparsed"]  # fmt: skip

    def num(v, spec: str = ".1f"):
        return "-" if v is None else format(v, spec)

    rows = [
        [f"{r['gamma']:g}", num(r["win_rate"]), num(r["low"]), num(r["high"]), num(r.get("order_agreement"), ".2f"),
         num(r.get("first_position_rate"), ".2f"), num(r["lc_win_rate"]), r.get("n_wins", 0), r.get("n_losses", 0),
         r.get("n_draws", 0), r["n_verdicts"], r["unparsed"]]
        for r in alpaca["levels"]
    ]  # fmt: skip
    return Table(headers, rows)


def alpaca_blocks(alpaca: dict[str, Any], output_dir: str) -> list[Block]:
    """The head-to-head section of a report folder: the judge, the win-rate table, the plot."""
    note = alpaca.get("lc_missing_reason")
    plot = os.path.join(output_dir, ALPACA_PLOT)
    blocks: list[Block] = [
        Heading(f"Head-to-head: {alpaca['model']} vs {alpaca['reference']}"),
        Text(
            f"judge: {judge_label(alpaca)}. Every pair judged in both orders; win rates in percent, draws count half, "
            "95% bootstrap interval over instructions (and training seeds). Order agreement: share of pairs judged "
            "alike in both orders; first-position rate: share of decided verdicts for the answer shown first."
        ),
    ]
    if alpaca.get("judge_is_proxy"):
        blocks.append(
            Text(
                "Proxy judge: it prefers the answer closer to the data's reference answer in sentence embeddings; it "
                "measures resemblance to the reference, not quality.",
                strong=True,
            )
        )
    blocks.append(level_table(alpaca))
    if note:
        blocks.append(Text(f"No length-controlled win rate: {note}."))
    if os.path.isfile(plot):
        blocks.append(Image(plot))
    return blocks


def folder_sections(output_dir: str) -> list[Block]:
    """The AlpacaEval section of a report folder, if `eval alpaca` wrote one there (kept when the robustness part
    of the page is rewritten)."""
    path = os.path.join(output_dir, ALPACA_JSON)
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return alpaca_blocks(json.load(f), output_dir)


def write_alpaca(alpaca: dict[str, Any], output_dir: str) -> dict[str, str]:
    """alpaca_eval.json and its plot, then report.html again (with the robustness results if the folder has them)."""
    os.makedirs(output_dir, exist_ok=True)
    paths = {"json": os.path.join(output_dir, ALPACA_JSON), "plot": os.path.join(output_dir, ALPACA_PLOT)}
    write_json(paths["json"], {**alpaca, "files": paths})
    plot_win_rates(alpaca, paths["plot"])
    results = RobustnessResults.load(output_dir)
    if results is not None:
        paths["html"] = write_report(results, output_dir, more_sections=folder_sections(output_dir))["html"]
    else:
        page = Document("Head-to-head", alpaca_blocks(alpaca, output_dir))
        paths["html"] = write_html(os.path.join(output_dir, "report.html"), page)
    return paths
