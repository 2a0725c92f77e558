"""
`constrained-sft eval robustness`: the headline (token accuracy, accuracy or RMSE) against the noise level, layerwise
curves and descent statistics for models or arms of models on held-out data, with every difference between arms
given a 95% paired interval and a verdict; written as results.json / results.csv / PNG plots / report.html.

    constrained-sft eval robustness --recipe recipes/smollm2-135m/sharegpt/constrained.yaml \\
        --arm constrained=outputs/c-seed0,outputs/c-seed1 --arm erm=outputs/e-seed0,outputs/e-seed1 \\
        --output_dir outputs/robustness

With `--recipe`, the held-out rows are the ones the training run carved off (same data fields and seed).
"""

from __future__ import annotations

import dataclasses

from .base import Command, other_tasks


class RobustnessCommand(Command):
    name = "robustness"
    help = "the headline metric vs noise, layer curves, descent; differences between arms with 95% intervals"

    def run(self, argv: list[str], prog: str) -> int:
        from ..utils.recipe_files import recipe_and_task_name, with_shipped

        # the recipe found and read before the stack loads: a mistyped `--recipe` is answered at once
        recipe, task_name, argv = recipe_and_task_name(with_shipped(argv, ("--recipe",)), prog, flag="--recipe")
        from ..evaluation import RobustnessArguments, run
        from ..evaluation.robustness import console_lines
        from ..tasks import get_task
        from ..tasks.recipes import dataclass_parser, parse

        task = get_task(task_name)
        description = (
            f"{prog} (--models DIR [DIR ...] | --arm NAME=DIR[,DIR...] --arm ...) --output_dir DIR [--recipe "
            "<recipe.yaml>]: evaluate models against the noise level and compare arms with intervals."
        )
        parser = dataclass_parser(
            (RobustnessArguments, task.data_arguments), prog, description, other_tasks(prog, task)
        )
        if recipe:
            data_fields = {f.name for f in dataclasses.fields(task.data_arguments)}
            defaults = {k: v for k, v in recipe.items() if k in data_fields}
            if recipe.get("max_length"):  # evaluate with the truncation the model was trained with
                defaults["max_length"] = recipe["max_length"]
            parser.set_defaults_with_config(**defaults, task=task.name)
        args, data_args = parse(parser, argv, with_config=False)
        from ..utils.written_record import recording

        with recording(args.output_dir):  # every file written there recorded; a user's edit kept
            print("\n".join(console_lines(run(args, data_args, recipe))))
        return 0
