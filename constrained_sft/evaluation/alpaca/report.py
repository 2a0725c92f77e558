"""
A head-to-head judging as report content (`eval alpaca`, the study): the win-rate table and plot, the judge named
(and marked as a proxy where it is one), what an API judge cost, and the AlpacaEval part of a report folder:
alpaca_eval.json, the plot, and its part of the folder's report.html (`report.page`), beside any robustness results.
"""

from __future__ import annotations

import os
import textwrap

from ...utils.figures import pyplot, save_figure
from ...utils.files import write_json
from ..report import PARTS, Block, Heading, Image, PagePart, Table, Text, write_page
from .answer_folders import VerdictsFolder
from .cost import MAX_TOKENS
from .headtohead import DRAW_TOLERANCE
from .results import ALPACA_EVAL_SIZE, HeadToHead, JudgeCost

ALPACA_PLOT = "alpaca_win_rate.png"


def judge_label(head: HeadToHead) -> str:
    """The judge's name, marked as a proxy where it is one."""
    proxy = " - PROXY, not a quality judge" if head.judge_is_proxy else ""
    return f"{head.judge_config}{proxy}"


def plot_win_rates(head: HeadToHead, path: str) -> str:
    """Win rate (and LC win rate) of the model over the reference against gamma, with the 95% bootstrap interval."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = head.judged_levels
    gammas = [r.gamma for r in rows]
    ax.plot(gammas, [r.win_rate for r in rows], marker="o", label="win rate (both orders, draws half)")
    ax.fill_between(gammas, [r.low for r in rows], [r.high for r in rows], alpha=0.2, label="95% interval")
    if any(r.lc_win_rate is not None for r in rows):
        ax.plot(gammas, [r.lc_win_rate for r in rows], marker="s", label="length-controlled win rate")
    ax.axhline(50, color="grey", linestyle="--", linewidth=1)
    ax.set(xlabel="embedding noise gamma", ylabel="win rate (%)", ylim=(0, 100))
    judge = "\n".join(textwrap.wrap(f"judge: {judge_label(head)}", 80))  # a long proxy label: wrapped, not cut
    ax.set_title(f"{head.model} vs {head.reference}\n{judge}", fontsize=9)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def level_table(head: HeadToHead) -> Table:
    """The win-rate table, one row per level, shared by every report that shows a head-to-head."""
    headers = ["gamma", "win rate %", "low", "high", "order agreement", "first-position rate", "LC win rate", "wins",
               "losses", "draws", "verdicts", "unparsed", "empty answers (model / reference)"]  # fmt: skip

    def num(v, spec: str = ".1f"):
        return "-" if v is None else format(v, spec)

    rows = [
        [f"{r.gamma:g}", num(r.win_rate), num(r.low), num(r.high), num(r.order_agreement, ".2f"),
         num(r.first_position_rate, ".2f"), num(r.lc_win_rate), r.n_wins, r.n_losses, r.n_draws, r.n_verdicts,
         r.unparsed, f"{r.empty_model} / {r.empty_reference}"]
        for r in head.levels
    ]  # fmt: skip
    return Table(headers, rows)


def cost_text(cost: JudgeCost | None) -> str | None:
    """What an API judge's verdicts cost, this run's share, per comparison (one pair, both orders: two verdicts), and
    what a full AlpacaEval level (805 pairs) costs at that rate; None for a judge that pays nothing."""
    if cost is None:
        return None
    earlier = max(cost.verdicts - cost.requests, 0)
    asked = f"{cost.requests:,} requested by this run" if cost.requests else "none requested by this run"
    asked += f", {earlier:,} answered by an earlier run" if earlier else ""
    text = f"Judge cost: {cost.verdicts:,} verdicts ({asked})"
    if cost.invalid_usage:
        text += (
            f"; the server reported impossible usage for {cost.invalid_usage:,} (negative, or over "
            f"{MAX_TOKENS:,} tokens a request): left out of the sums, never priced"
        )
    if cost.total_tokens is None:
        return f"{text}; token usage unknown (not reported by the server, or judged by an earlier version)."
    if cost.with_usage < cost.verdicts:
        text += (
            f"; usage known for {cost.with_usage:,} (alpaca_eval keeps nothing of a verdict it could not parse; "
            "the sums leave the others out)"
        )
    split = (
        ""
        if cost.prompt_tokens is None
        else f" ({cost.prompt_tokens:,} prompt + {cost.completion_tokens:,} completion)"
    )
    parts = [text, f"{cost.total_tokens:,} tokens{split}"]
    if cost.price_usd is not None:
        parts.append(f"${cost.price_usd:.4f} {cost.price_basis}")
    else:
        parts.append(f"no price (a self-hosted judge, or no list price here for {cost.model})")
    tokens, price = cost.per_verdict(cost.total_tokens), cost.per_verdict(cost.price_usd)
    per = [] if tokens is None else [f"{2 * tokens:,.0f} tokens"]
    if price is not None:
        comparison = 2 * price
        per += [
            f"${comparison:.4f}; a full AlpacaEval level ({ALPACA_EVAL_SIZE} pairs) at this rate: "
            f"${ALPACA_EVAL_SIZE * comparison:.2f} per seed pair"
        ]
    return ", ".join(parts) + (f". Per comparison (one pair, both orders): {', '.join(per)}." if per else ".")


def alpaca_blocks(head: HeadToHead, output_dir: str) -> list[Block]:
    """The head-to-head section of a report folder: the judge, the win-rate table, the plot."""
    note = head.lc_missing_reason
    plot = os.path.join(output_dir, ALPACA_PLOT)
    blocks: list[Block] = [
        Heading(f"Head-to-head: {head.model} vs {head.reference}"),
        Text(
            f"judge: {judge_label(head)}. Every pair judged in both orders; win rates in percent, draws count half, "
            "95% bootstrap interval over instructions (and training seeds). Order agreement: share of pairs whose "
            "two orders favour the same answer; first-position rate: share of decided verdicts for the answer shown "
            f"first; wins, losses and draws likewise by the answer a verdict favours (a weighted judge's preference "
            f"within {DRAW_TOLERANCE:g} of even is a draw)."
        ),
    ]
    if head.judge_is_proxy:
        blocks.append(
            Text(
                "Proxy judge: it prefers the answer closer to the data's reference answer in sentence embeddings; it "
                "measures resemblance to the reference, not quality.",
                strong=True,
            )
        )
    blocks.append(level_table(head))
    if cost := cost_text(head.cost):
        blocks.append(Text(cost))
    if note:
        blocks.append(Text(f"No length-controlled win rate: {note}."))
    if os.path.isfile(plot):
        blocks.append(Image(plot))
    return blocks


def write_alpaca(head: HeadToHead, output_dir: str) -> dict[str, str]:
    """alpaca_eval.json and its plot, then the folder's report.html again (with the robustness results if the
    folder holds them)."""
    os.makedirs(output_dir, exist_ok=True)
    paths = {"json": VerdictsFolder(output_dir).results_json, "plot": os.path.join(output_dir, ALPACA_PLOT)}
    write_json(paths["json"], {**head.to_dict(), "files": paths})
    plot_win_rates(head, paths["plot"])
    paths["html"] = write_page(output_dir)
    return paths


@PARTS.register
class AlpacaPart(PagePart):
    """The head-to-head's part of a report folder: after the robustness results, if the folder holds them."""

    name, title, position = "alpaca", "Head-to-head", 1

    @classmethod
    def blocks(cls, output_dir: str) -> list[Block]:
        head = HeadToHead.load(output_dir)
        return [] if head is None else alpaca_blocks(head, output_dir)
