"""The study's one report, as report.html (self-contained: plots embedded) and report.md (plots linked): the budget,
the constrained - ERM differences with intervals, accuracy / layer-loss / descent plots, the head-to-head win rate
with its interval and the judge's order agreement, a few answers side by side per level, timings, settings."""

from __future__ import annotations

import html
import json
import os
from typing import Any

from ..evaluation.alpaca.report import judge_label, level_rows, plot_win_rates
from ..evaluation.compare import table as markdown_comparisons
from ..evaluation.report import comparison_sections, img, table, write_html
from ..utils import write_text

PLOTS = ("differences", "layers", "ratios", "descent")  # robustness report files shown after the headline's plot
PROXY_NOTE = (
    "The judge is a PROXY: it prefers the answer closer to the data's reference answer in sentence embeddings. It "
    "measures resemblance to the reference, not answer quality; use a capable judge (`--judge gpt5` or `--judge local "
    "--judge_model <chat model>`) for a quality comparison."
)
CLIP = 700  # characters of an answer shown in the report (the whole answer is in generations/)


def examples(study_dir: str, gamma: float, n: int) -> list[dict[str, Any]]:
    """The first `n` instructions at one level: seed 0's answers of both arms and the judge's two verdicts."""
    if n == 0:
        return []
    with open(os.path.join(study_dir, "judging", f"gamma_{float(gamma)}", "verdicts-0.json")) as f:
        return json.load(f)[:n]


def verdict_text(row: dict[str, Any]) -> str:
    words = {1.0: "constrained", 0.0: "ERM", 0.5: "draw", None: "unparsed"}
    return f"constrained shown first: {words[row['model_first']]}; ERM shown first: {words[row['model_second']]}"


def summary_rows(study: dict[str, Any]) -> tuple[list[str], list[list]]:
    key = study["robustness"]["headline"]["key"]
    headers = ["model", f"AUC ({key})", f"ID {key}", f"OOD {key}", "descent share"]
    rows = [[n, s["auc"], s[f"id_{key}"], s[f"ood_{key}"], s["descent_share"]] for n, s in study["summaries"].items()]
    return headers, rows


def markdown_table(headers: list[str], rows: list[list]) -> str:
    def cell(v):
        return f"{v:.4f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows])


def clip(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= CLIP else text[:CLIP] + " [...]"


def write_study_report(study: dict[str, Any], study_dir: str, n_examples: int) -> dict[str, str]:
    head = study["head_to_head"]
    files = study["robustness"]["files"]
    plots = [files[k] for k in (study["robustness"]["headline"]["key"], *PLOTS) if k in files]
    win_plot = plot_win_rates(head, os.path.join(study_dir, "win_rate_vs_gamma.png"))
    budget = study["settings"]["budget"]
    budget_text = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in budget.items())
    gammas = [lv["gamma"] for lv in head["levels"]]
    shown = {g: examples(study_dir, g, n_examples) for g in gammas}
    proxy = head.get("judge_is_proxy")

    # --- HTML
    sections = [
        "<h1>Constrained vs ERM study</h1>",
        f"<p>Budget: {html.escape(budget_text)}. Intervals are 95% paired bootstraps over training seeds and "
        "held-out units; a verdict is better / worse only when the whole interval lies on one side of 0.</p>",
        *comparison_sections(
            {"comparisons": study["robustness"]["comparisons"], "settings": study["robustness"]["settings"]}
        ),
        "<h2>Models</h2>" + table(*summary_rows(study)),
        "<h2>Robustness plots</h2>" + "".join(img(p) for p in plots),
        f"<h2>Head-to-head answers (judge: {html.escape(judge_label(head))})</h2>",
        f"<p><b>{html.escape(PROXY_NOTE)}</b></p>" if proxy else "",
        "<p>Constrained seed s against ERM seed s, every pair in both orders; draws count half.</p>",
        table(*level_rows(head)),
        f"<p>No length-controlled win rate: {html.escape(head['lc_missing_reason'])}.</p>"
        if head.get("lc_missing_reason")
        else "",
        img(win_plot),
    ]
    for gamma, rows in shown.items():
        body = "".join(
            f"<tr><td style='text-align:left'>{html.escape(clip(r['instruction']))}</td>"
            f"<td style='text-align:left'>{html.escape(clip(r.get('reference')))}</td>"
            f"<td style='text-align:left'>{html.escape(clip(r['model_output']))}</td>"
            f"<td style='text-align:left'>{html.escape(clip(r['reference_output']))}</td>"
            f"<td>{html.escape(verdict_text(r))}</td></tr>"
            for r in rows
        )
        sections.append(
            f"<h3>Answers at gamma = {gamma:g} (seed 0)</h3><table><tr><th>instruction</th><th>data's answer</th>"
            f"<th>constrained</th><th>ERM</th><th>verdicts</th></tr>{body}</table>"
        )
    timing_rows = [[k, v] for k, v in _timings(study["timings"]).items()]
    sections += [
        "<h2>Wall time per stage (seconds, summed over the invocations that did its work)</h2>"
        + table(["stage", "seconds"], timing_rows),
        f"<h2>Settings</h2><pre>{html.escape(json.dumps(study['settings'], indent=1, default=str))}\n"
        f"{html.escape(str(study['versions']))}</pre>",
    ]
    paths = {"html": write_html(os.path.join(study_dir, "report.html"), sections, "Constrained vs ERM study")}

    # --- Markdown
    lines = ["# Constrained vs ERM study", "", f"Budget: {budget_text}.", ""]
    lines += ["## Differences, constrained - ERM (95% paired bootstrap)", ""]
    lines += [markdown_comparisons(study["robustness"]["comparisons"]), ""]
    lines += ["## Models", "", markdown_table(*summary_rows(study)), ""]
    lines += [f"![{os.path.basename(p)}]({os.path.relpath(p, study_dir)})" for p in plots] + [""]
    lines += [f"## Head-to-head answers (judge: {judge_label(head)})", ""]
    lines += ([f"**{PROXY_NOTE}**", ""] if proxy else []) + [markdown_table(*level_rows(head)), ""]
    if head.get("lc_missing_reason"):
        lines += [f"No length-controlled win rate: {head['lc_missing_reason']}.", ""]
    lines += [f"![win rate]({os.path.basename(win_plot)})", ""]
    for gamma, rows in shown.items():
        lines += [f"### Answers at gamma = {gamma:g} (seed 0)", ""]
        for r in rows:
            lines += [f"**Instruction:** {clip(r['instruction'])}", ""]
            for label, text in (("data's answer", r.get("reference")), ("constrained", r["model_output"]),
                                ("ERM", r["reference_output"])):  # fmt: skip
                lines += [f"*{label}:*", "", "> " + clip(text).replace("\n", "\n> "), ""]
            lines += [f"*verdicts:* {verdict_text(r)}", ""]
    lines += [
        "## Wall time per stage (seconds, summed over the invocations that did its work)",
        "",
        markdown_table(["stage", "seconds"], timing_rows),
        "",
    ]
    paths["md"] = os.path.join(study_dir, "report.md")
    write_text(paths["md"], "\n".join(lines))
    paths["win_rate_plot"] = win_plot
    return paths


def _timings(timings: dict[str, Any]) -> dict[str, float]:
    """Training runs one row each (as timed when they ran), then the stages."""
    out = {f"train {run}": s for run, s in timings.get("train", {}).items()}
    return out | {k: v for k, v in timings.items() if k != "train"}
