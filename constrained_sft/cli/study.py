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

from .base import Command, other_tasks, own_process


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
        from ..comparison import RunKey, arm_label
        from ..comparison.recipes import arm_recipe, more_recipes
        from ..config import ProcessArguments
        from ..evaluation.alpaca.report import judge_label
        from ..evaluation.report import comparisons_markdown
        from ..study import StudyArguments, run
        from ..study.results import StudyResults
        from ..tasks import get_task
        from ..tasks.recipes import dataclass_parser, parse

        task = get_task(task_name)
        description = (
            f"{prog} --config <constrained recipe.yaml> --erm_config <ERM recipe.yaml> [--arm NAME=RECIPE.yaml ...] "
            "[--training_seeds N] [--field value ...]: train every arm with N seeds, measure them, judge each arm's "
            "answers against the reference arm's, report."
        )

        def parser():  # one per recipe: a parser keeps the keys of the recipe it read as its defaults
            return dataclass_parser(
                (StudyArguments, ProcessArguments, *task.parser_classes()), prog, description, other_tasks(prog, task)
            )

        args, process, *constrained = parse(parser(), argv)
        constrained = task.recipe(tuple(constrained))
        erm = arm_recipe(task, parser, argv, args.erm_config, "--erm_config") if args.erm_config else constrained
        more = more_recipes(task, parser, argv, args.extra_arms())
        own_process(process, constrained.training)
        out = run(args, task, constrained, erm, more)
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
        print(comparisons_markdown(out.robustness.comparisons))
        for head in (out.head_to_head, *out.more_head_to_heads.values()):
            a, b = arm_label(head.model), arm_label(head.reference)
            for lv in head.levels:
                agreement = "-" if lv.order_agreement is None else f"{lv.order_agreement:.2f}"
                print(
                    f"gamma={lv.gamma:g}: {a} beats {b} {lv.win_rate:.1f}% [{lv.low:.1f}, {lv.high:.1f}] "
                    f"({lv.n_verdicts} verdicts, both orders; order agreement {agreement}; judge: {judge_label(head)})"
                )
        print(can_show(out))
        print(f"report: {out.files['html']} and {out.files['md']}")
        return 0


def can_show(study) -> str:
    """What this budget resolved and what it did not, in words (`study`: the study's results)."""
    rows = next(iter(study.robustness.comparisons.values())).rows
    resolved = [k for k, row in rows.items() if row.difference.verdict != "same"]
    widths = [lv.high - lv.low for lv in study.head_to_head.judged_levels]
    budget = study.budget
    text = (
        f"At this budget ({budget.training_seeds_per_arm} training seed(s) per arm, {budget.max_steps} steps, "
        f"{budget.held_out_sequences} held-out sequences) {len(resolved)} of {len(rows)} differences are "
        f"resolved ({', '.join(resolved) or 'none'}); the others' intervals contain 0, which says the budget cannot "
        "tell the arms apart there, not that they are equal."
    )
    if widths and math.isfinite(max(widths)):
        text += f" Win-rate intervals are up to {max(widths):.0f} points wide."
    if study.head_to_head.judge_is_proxy:
        text += " The judge is a proxy (similarity to the reference answer), not a judge of quality."
    return text
