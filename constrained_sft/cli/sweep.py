"""
`constrained-sft sweep`: hyperparameter search of a recipe of any task, and the constrained-vs-ERM comparison.

    constrained-sft sweep --config recipes/minilm/rotten-tomatoes/constrained.yaml \\
        --space recipes/minilm/rotten-tomatoes/sweep.yaml --n_trials 20 --baseline erm

The recipe's keys set everything a trial does not search; the sweep's own options are the fields of
`SweepArguments` (`constrained_sft.sweep`).
"""

from __future__ import annotations

from .base import Command, comparison_parser, own_process


class SweepCommand(Command):
    name = "sweep"
    help = (
        "Optuna search of a recipe (SFT, classification or video) on a validation carve-off; --baseline erm "
        "compares the best constrained and ERM configurations on held-out data with confidence intervals"
    )

    def run(self, argv: list[str], prog: str) -> int:
        from ..utils.recipe_files import recipe_and_task_name, with_shipped

        # the recipes and the search space found (the recipes read) before the stack loads: a mistyped one is
        # answered at once
        _, task_name, argv = recipe_and_task_name(with_shipped(argv, ("--config", "--space"), "--arm"), prog)
        from ..comparison.recipes import more_recipes
        from ..evaluation.report import comparisons_markdown
        from ..sweep import SweepArguments, run
        from ..sweep.report import searched_line
        from ..tasks import get_task
        from ..tasks.recipes import parse

        task = get_task(task_name)
        description = (
            f"{prog} --config <constrained recipe.yaml> --space <sweep.yaml> [--baseline erm] [--field value ...]: "
            "search the recipe's hyperparameters, then compare the best configurations."
        )

        parser = comparison_parser(SweepArguments, task, prog, description)

        settings, launcher, process, *fields = parse(parser(), argv)
        more = more_recipes(task, parser, argv, settings.extra_arms())
        recipe = task.recipe(tuple(fields))
        own_process(process, recipe.training)
        out = run(settings, task, recipe, more, launcher)
        for arm, info in out.arms.items():
            best = info.best
            print(
                f"{arm}: {len(info.trials)} trials; best "
                + ("none" if best is None else f"{best.value:.4f} (trial {best.trial})")
                + f". {searched_line(info)}"
            )
        if out.comparisons is not None:  # compared
            print(comparisons_markdown(out.comparisons))
        print(f"report: {out.settings.sweep_dir}/report.md")
        return 0
