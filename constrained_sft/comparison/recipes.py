"""The recipes of a comparison's arms from one command line (`study --erm_config / --arm`, `sweep --arm`): each recipe
read through the same parser, with the command line's overrides reaching every arm."""

from __future__ import annotations

from collections.abc import Callable

from ..tasks import AnyRecipe, Task
from ..tasks.recipes import RecipeParser, parse
from ..utils.recipe_files import read_recipe


def with_config(argv: list[str], config: str) -> list[str]:
    """The command line with `--config` pointing at another recipe (added when it has none): the same overrides reach
    every arm of a comparison."""
    out, i, found = [], 0, False
    while i < len(argv):
        if argv[i] == "--config":
            out += ["--config", config]
            found, i = True, i + 2
            continue
        if argv[i].startswith("--config="):
            out.append(f"--config={config}")
            found = True
        else:
            out.append(argv[i])
        i += 1
    return out if found else ["--config", config, *out]


def arm_recipe(task: Task, parser: Callable[[], RecipeParser], argv: list[str], path: str, flag: str) -> AnyRecipe:
    """The recipe at `path` with the command line's overrides; a broken recipe refused naming `flag`, before TRL
    reads it. `parser` makes a new parser (one keeps the keys of the recipe it read as its defaults); the command's own
    options (the dataclasses before the task's) are left out."""
    read_recipe(path, flag)
    parsed = parse(parser(), with_config(argv, path))
    return task.recipe(tuple(parsed[-len(task.parser_classes()) :]))


def more_recipes(
    task: Task, parser: Callable[[], RecipeParser], argv: list[str], arms: dict[str, str]
) -> dict[str, AnyRecipe]:
    """{name: recipe} of every `--arm NAME=RECIPE.yaml` (`arms`: {name: path})."""
    return {name: arm_recipe(task, parser, argv, path, f"--arm {name}") for name, path in arms.items()}
