"""The study's one report, as report.html (self-contained: plots embedded) and report.md (plots linked): the budget,
the constrained - ERM differences with intervals, accuracy / layer-loss / descent plots, the head-to-head win rate
with its interval and the judge's order agreement, a few answers side by side per level, timings, settings."""

from __future__ import annotations

import json

from ..comparison import CONSTRAINED, ERM, arm_label
from ..evaluation import HeadToHead
from ..evaluation.alpaca import cost_text, judge_label, level_table, plot_win_rates
from ..evaluation.exits import exits_blocks
from ..evaluation.report import (
    Block,
    Document,
    Heading,
    Image,
    Preformatted,
    Table,
    Text,
    comparison_blocks,
    write_html,
    write_markdown,
)
from ..evaluation.robustness import summary_table
from ..utils.types import JSONObject, JSONRead
from .results import StudyResults, StudyTimings
from .study_folder import StudyFolder

PLOTS = ("differences", "layers", "ratios", "descent")  # robustness report files shown after the headline's plot
PROXY_NOTE = (
    "The judge is a PROXY: it prefers the answer closer to the data's reference answer in sentence embeddings. It "
    "measures resemblance to the reference, not answer quality; use a capable judge (`--judge gpt5` or `--judge local "
    "--judge_model <chat model>`) for a quality comparison."
)
CLIP = 700  # characters of an answer shown in the report (the whole answer is in generations/)


def examples(
    folder: StudyFolder, gamma: float, n: int, model: str = CONSTRAINED, reference: str = ERM
) -> list[JSONRead]:
    """The first `n` instructions at one level: seed 0's answers of `model` and `reference` and the judge's two
    verdicts."""
    if n == 0:
        return []
    with open(folder.verdicts(gamma, 0, model, reference)) as f:
        verdicts: list[JSONRead] = json.load(f)
    return verdicts[:n]


def verdict_text(row: JSONObject, model: str = CONSTRAINED, reference: str = ERM) -> str:
    a, b = arm_label(model), arm_label(reference)
    words: dict[object, str] = {1.0: a, 0.0: b, 0.5: "draw", None: "unparsed"}
    return f"{a} shown first: {words[row['model_first']]}; {b} shown first: {words[row['model_second']]}"


def clip(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= CLIP else text[:CLIP] + " [...]"


def study_blocks(study: StudyResults, folder: StudyFolder, n_examples: int, win_plot: str | None) -> list[Block]:
    """The report's content, once for both formats: budget, differences, models, plots, head-to-head with examples,
    timings, settings. `win_plot`: the first head-to-head's plot (None: nothing judged yet)."""
    head, results = study.head_to_head, study.robustness
    shown = {k: v for k, v in study.budget.to_dict().items() if k != "runs_missing"}
    budget_text = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in shown.items())
    plots = [p for k in (results.headline.key, *PLOTS) if isinstance(p := results.files.get(k), str)]
    reference = head.reference if head is not None else study.settings.study.reference
    blocks: list[Block] = [
        Heading("Constrained vs ERM study", 1),
        Text(
            f"Budget: {budget_text}. Intervals are 95% paired bootstraps over training seeds and held-out units; a "
            "verdict is better / worse only when the whole interval lies on one side of 0."
        ),
        *missing_note(study),
        Heading(f"Differences, each arm - {arm_label(reference)} (95% paired bootstrap)"),
        *comparison_blocks(results.comparisons, results.settings.bootstrap_samples, level=3),
        Heading("Models"),
        summary_table(results.headline, results.summaries, train_gamma=False),
        Heading("Robustness plots"),
        *(Image(p) for p in plots),
    ]
    if head is None or win_plot is None:
        blocks += [
            Heading("Head-to-head answers"),
            Text("Not judged yet: no seed has every arm's answers.", strong=True),
        ]
    else:
        blocks += head_to_head_blocks(study, head, folder, n_examples, win_plot)
    for arm, other in study.more_head_to_heads.items():
        plot = plot_win_rates(other, folder.win_plot(arm))
        blocks += [
            Heading(f"Head-to-head: {arm} vs {arm_label(other.reference)} (judge: {judge_label(other)})"),
            level_table(other),
            Image(plot, f"win rate of {arm}"),
        ]
    if study.exits is not None:
        blocks += exits_blocks(study.exits, level=2)
    blocks += [
        Heading("Wall time per stage (seconds, summed over the invocations that did its work)"),
        Table(["stage", "seconds"], [[k, v] for k, v in _timings(study.timings).items()]),
    ]
    if study.timings.requeues:
        rows = [
            [run, r["restart"], r["why"], r["phase"]] for run, found in study.timings.requeues.items() for r in found
        ]
        blocks += [
            Heading("Slurm jobs requeued (each went on from its checkpoint and recorded phases)", 3),
            Table(["run", "restart", "why", "phase it was in"], rows),
        ]
    if study.timings.runs:
        blocks += [
            Heading("Each run's phases: estimated and measured seconds", 3),
            Table(["run", "phase", "estimated", "measured"], _phase_rows(study.timings)),
        ]
    blocks += [
        Heading("Settings"),
        Preformatted(f"{json.dumps(study.settings.to_dict(), indent=1, default=str)}\n{study.versions}"),
    ]
    return blocks


def head_to_head_blocks(
    study: StudyResults, head: HeadToHead, folder: StudyFolder, n_examples: int, win_plot: str
) -> list[Block]:
    """The first head-to-head: the judge, the win rates per level with their intervals, the empty answers, examples."""
    blocks: list[Block] = [Heading(f"Head-to-head answers (judge: {judge_label(head)})")]
    if head.judge_is_proxy:
        blocks.append(Text(PROXY_NOTE, strong=True))
    blocks += [
        Text(
            f"{arm_label(head.model).capitalize()} seed s against {arm_label(head.reference)} seed s, every "
            "pair in both orders; draws count half. An empty answer loses to any answer without asking the judge "
            "(both empty: a draw)."
        ),
        level_table(head),
    ]
    if cost := cost_text(head.cost):
        blocks.append(Text(cost))
    if head.lc_missing_reason:
        blocks.append(Text(f"No length-controlled win rate: {head.lc_missing_reason}."))
    blocks.append(Image(win_plot, "win rate"))
    for gamma in [lv.gamma for lv in head.levels]:
        rows = [
            [
                clip(r["instruction"]),
                clip(r.get("reference")),
                clip(r["model_output"]),
                clip(r["reference_output"]),
                verdict_text(r, head.model, head.reference),
            ]
            for r in examples(folder, gamma, n_examples, head.model, head.reference)
        ]
        headers = ["instruction", "data's answer", arm_label(head.model), arm_label(head.reference), "verdicts"]
        blocks += [Heading(f"Answers at gamma = {gamma:g} (seed 0)", 3), Table(headers, rows, prose=True)]
    return blocks


def missing_note(study: StudyResults) -> list[Block]:
    """What a study cut by its time budget has not run yet (the report covers the seeds every arm finished)."""
    missing = study.budget.runs_missing
    if not missing:
        return []
    judged = study.budget.judged_seeds_per_arm
    answered = f", the head-to-heads the {judged} every arm has answered" if judged is not None else ""
    return [
        Text(
            f"Incomplete: {len(missing)} run(s) or phases not done yet ({'; '.join(missing)}); this report covers "
            f"the {study.budget.training_seeds_per_arm} training seed(s) every arm has measured{answered}. Run the "
            "same command again to continue.",
            strong=True,
        )
    ]


def write_study_report(study: StudyResults, folder: StudyFolder, n_examples: int) -> dict[str, str]:
    """report.html (plots embedded) and report.md (plots linked) from the same blocks, and the win-rate plot."""
    win_plot = None
    if study.head_to_head is not None:
        win_plot = plot_win_rates(study.head_to_head, folder.win_plot())
    document = Document("Constrained vs ERM study", study_blocks(study, folder, n_examples, win_plot))
    return {
        "html": write_html(folder.report_html, document),
        "md": write_markdown(folder.report_md, document),
        **({"win_rate_plot": win_plot} if win_plot else {}),
    }


def _timings(timings: StudyTimings) -> dict[str, float]:
    """Training runs one row each (as timed when they ran), then the stages."""
    return {f"train {run}": s for run, s in timings.train.items()} | timings.stages


def _phase_rows(timings: StudyTimings) -> list[list[object]]:
    """Per run and phase: the plan's estimate beside the measured seconds."""
    return [
        [run, phase, "-" if t["estimate"] is None else t["estimate"], t["measured"]]
        for run, phases in timings.runs.items()
        for phase, t in phases.items()
    ]
