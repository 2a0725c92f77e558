"""
`constrained-sft train`: fine-tune from a YAML recipe plus command-line overrides, the way `trl sft` does; the
recipe's `task` (or `--task`) chooses what is trained (`constrained_sft.tasks`).

    constrained-sft train --config recipes/smollm2-135m/sharegpt/constrained.yaml [--max_steps 10 ...]
    accelerate launch --config_file accelerate_configs/ddp.yaml -m constrained_sft train --config <recipe>

YAML keys are exactly the fields `--help` lists for the task; an unknown key is an error. Everything that can be
checked (keys, model path, data rows) is checked before anything is written.
"""

from __future__ import annotations

import argparse
import dataclasses

from .base import Command, other_tasks, own_process


class TrainCommand(Command):
    name = "train"
    help = "fine-tune from a YAML recipe: constrained-sft train --config <recipe.yaml> [--field value ...]"

    def run(self, argv: list[str], prog: str) -> int:
        from ..utils.recipe_files import recipe_and_task_name, with_shipped

        # the recipe found and read before the training stack loads: a mistyped `--config` is answered at once
        recipe, task_name, argv = recipe_and_task_name(with_shipped(argv, ("--config",)), prog)
        from ..config import ProcessArguments
        from ..tasks import get_task
        from ..tasks.base import require_model
        from ..tasks.recipes import dataclass_parser, parse

        task = get_task(task_name)
        description = (
            f"Fine-tune from a YAML recipe: {prog} --config <recipe.yaml> [--field value ...]. Command-line values "
            "override the recipe's; `task` (sft, classification or video) chooses what is trained."
        )
        classes = (ProcessArguments, *task.parser_classes())
        parser = dataclass_parser(classes, prog, description, other_tasks(prog, task))
        argparse.ArgumentParser.parse_known_args(parser, argv)  # --help, a flag without its value: argparse's own
        fields = {f.name for cls in classes for f in dataclasses.fields(cls)}
        given = recipe.get("model_name_or_path") or any(a.startswith("--model_name_or_path") for a in argv)
        if "model_name_or_path" in fields and not given:
            require_model(None)  # said first: the config's own checks (bf16 on a CPU) would otherwise come first
        process, *parsed = parse(parser, argv)
        built = task.recipe(tuple(parsed))
        own_process(process, built.training)
        task.training.train(built)
        return 0
