"""
`constrained-sft train`: fine-tune from a YAML recipe plus command-line overrides, the way `trl sft` does; the
recipe's `task` (or `--task`) chooses what is trained (`constrained_sft.tasks`).

    constrained-sft train --config recipes/smollm2-135m/sharegpt/constrained.yaml [--max_steps 10 ...]
    accelerate launch --config_file accelerate_configs/ddp.yaml -m constrained_sft train --config <recipe>

YAML keys are exactly the fields `--help` lists for the task; an unknown key is an error. Everything that can be
checked (keys, model path, data rows) is checked before anything is written.
"""

from __future__ import annotations

from .base import Command, dataclass_parser, other_tasks, parse, recipe_and_task


class TrainCommand(Command):
    name = "train"
    help = "fine-tune from a YAML recipe: constrained-sft train --config <recipe.yaml> [--field value ...]"

    def run(self, argv: list[str], prog: str) -> int:
        _, task, argv = recipe_and_task(argv, prog)
        description = (
            f"Fine-tune from a YAML recipe: {prog} --config <recipe.yaml> [--field value ...]. Command-line values "
            "override the recipe's; `task` (sft, classification or video) chooses what is trained."
        )
        parser = dataclass_parser(task.parser_classes(), prog, description, other_tasks(prog, task))
        task.train(task.recipe(parse(parser, argv)))
        return 0
