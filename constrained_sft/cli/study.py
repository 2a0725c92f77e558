"""
`constrained-sft study`: a constrained SFT recipe against its ERM twin, end to end.

    constrained-sft study --config recipes/smollm2-135m/sharegpt/constrained.yaml \\
        --erm_config recipes/smollm2-135m/sharegpt/erm.yaml --training_seeds 3

More arms (the same data and model, another objective or noise), each compared with the reference arm (ERM unless
`--reference` names another):

    constrained-sft study --config .../constrained.yaml --erm_config .../erm.yaml \
        --arm penalty=.../penalty.yaml --arm early-exit=.../early-exit.yaml --arm neftune=.../neftune.yaml

Recipe fields given on the command line (`--max_steps 20`) apply to every arm; the study's own options are the
fields of `StudyArguments` (`constrained_sft.study`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .base import Command, comparison_parser, own_process

if TYPE_CHECKING:
    from ..study.results import StudyResults


class StudyCommand(Command):
    name = "study"
    help = (
        "constrained vs ERM twins of an SFT recipe over training seeds: robustness with intervals, noisy answers "
        "judged head to head in both orders, one report"
    )

    def run(self, argv: list[str], prog: str) -> int:
        from ..utils.recipe_files import recipe_and_task_name, with_shipped

        # every arm's recipe found and read before the stack loads: a mistyped one is answered at once
        _, task_name, argv = recipe_and_task_name(with_shipped(argv, ("--config", "--erm_config"), "--arm"), prog)
        from ..comparison import RunKey
        from ..comparison.recipes import arm_recipe, more_recipes
        from ..study import StudyArguments, run
        from ..study.results import StudyResults
        from ..tasks import get_task
        from ..tasks.recipes import parse
        from ..utils.shipped import launch_config_of

        task = get_task(task_name)
        description = (
            f"{prog} --config <constrained recipe.yaml> --erm_config <ERM recipe.yaml> [--arm NAME=RECIPE.yaml ...] "
            "[--training_seeds N] [--field value ...]: train every arm with N seeds, measure them, judge each arm's "
            "answers against the reference arm's, report."
        )

        parser = comparison_parser(StudyArguments, task, prog, description)

        args, launcher, process, *fields = parse(parser(), argv)
        if args.accelerate_config is None:  # runs on several devices launch as the recipe's own first line does
            config = next((v for k, v in zip(argv, argv[1:], strict=False) if k == "--config"), None)
            args.accelerate_config = launch_config_of(config) if config else None
        constrained = task.recipe(tuple(fields))
        erm = arm_recipe(task, parser, argv, args.erm_config, "--erm_config") if args.erm_config else constrained
        more = more_recipes(task, parser, argv, args.extra_arms())
        own_process(process, constrained.training)
        out = run(args, task, constrained, erm, more, launcher)
        if not isinstance(out, StudyResults):  # `--stage train`, or a time budget that ended before a whole seed
            done = [
                p
                for arm, ps in out.folders.items()
                for s, p in enumerate(ps)
                if RunKey(s, arm).name not in out.missing
            ]
            print(f"trained: {', '.join(done) or 'none yet'}")
            if out.missing:
                print(f"still to do: {', '.join(out.missing)} (run the same command again)")
            return 0
        print("\n".join(summary_lines(out)))
        return 0


def summary_lines(study: StudyResults) -> list[str]:
    """What the command prints of a study's results: each arm's differences, each head-to-head per level (or that
    none is judged yet: no seed has every arm's answers), what the budget resolved, where the report is."""
    from ..comparison import arm_label
    from ..evaluation.alpaca.report import judge_label
    from ..evaluation.report import comparisons_markdown

    lines = [comparisons_markdown(study.robustness.comparisons)]
    heads = [h for h in (study.head_to_head, *study.more_head_to_heads.values()) if h is not None]
    if not heads:
        lines.append("head to head: not judged yet (no seed has every arm's answers; the same command continues)")
    for head in heads:
        a, b = arm_label(head.model), arm_label(head.reference)
        for lv in head.levels:
            agreement = "-" if lv.order_agreement is None else f"{lv.order_agreement:.2f}"
            lines.append(
                f"gamma={lv.gamma:g}: {a} beats {b} {lv.win_rate:.1f}% [{lv.low:.1f}, {lv.high:.1f}] "
                f"({lv.n_verdicts} verdicts, both orders; order agreement {agreement}; judge: {judge_label(head)})"
            )
    return [*lines, can_show(study), f"report: {study.files['html']} and {study.files['md']}"]


def can_show(study: StudyResults) -> str:
    """What this budget resolved and what it did not, in words."""
    rows = next(iter(study.robustness.comparisons.values())).rows
    resolved = [k for k, row in rows.items() if row.difference.verdict != "same"]
    head = study.head_to_head
    levels = head.judged_levels if head is not None else []
    widths = [lv.high - lv.low for lv in levels if lv.high is not None and lv.low is not None]
    budget = study.budget
    text = (
        f"At this budget ({budget.training_seeds_per_arm} training seed(s) per arm, {budget.max_steps} steps, "
        f"{budget.held_out_sequences} held-out sequences) {len(resolved)} of {len(rows)} differences are "
        f"resolved ({', '.join(resolved) or 'none'}); the others' intervals contain 0, which says the budget cannot "
        "tell the arms apart there, not that they are equal."
    )
    if widths and math.isfinite(max(widths)):
        text += f" Win-rate intervals are up to {max(widths):.0f} points wide."
    if head is not None and head.judge_is_proxy:
        text += " The judge is a proxy (similarity to the reference answer), not a judge of quality."
    return text
