"""
Recipes from the command line or a script: a YAML file of field names and values plus `--field value` overrides,
parsed by TRL's `TrlParser` into the dataclasses of the recipe's task. Everything is checked before any work: a flag
without its value is argparse's error, a recipe that is not a mapping is refused naming the file
(`utils.recipe_files`, which the commands ask before this module's stack loads), an unknown key or flag is refused
with the closest known fields, so a typo never passes as a default.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from trl import TrlParser

from ..utils import shipped
from ..utils.help_text import percent
from ..utils.recipe_files import recipe_and_task_name
from . import Recipe, Task, get_task


def _escaped(kwargs: dict) -> dict:
    return {**kwargs, "help": percent(kwargs["help"])} if kwargs.get("help") else kwargs


class RecipeParser(TrlParser):
    """
    TRL's parser of recipes and flags into dataclasses, with two changes through argparse's public API: a field's help
    may hold a literal '%' ("10%"; argparse formats help with `%`, so it is doubled as each argument is added; help
    already written for argparse, '%%' or '%(default)s', is kept), and `known_fields()` for the hints of `parse`.
    """

    def add_argument(self, *args, **kwargs):
        return super().add_argument(*args, **_escaped(kwargs))

    def add_argument_group(self, *args, **kwargs):
        group = super().add_argument_group(*args, **kwargs)
        add = group.add_argument
        vars(group)["add_argument"] = lambda *a, **kw: add(*a, **_escaped(kw))  # this group's own, escaping too
        return group

    def known_fields(self) -> list[str]:
        """Every field name a recipe key or flag may take."""
        return sorted({f.name for cls in self.dataclass_types for f in dataclasses.fields(cls) if f.init})


def dataclass_parser(
    classes: tuple[type, ...], prog: str, description: str, epilog: str | None = None
) -> RecipeParser:
    """A parser over `classes` whose `--help` shows `prog`, what it does, and the fields with their defaults."""
    # TRL's parser types its dataclass types as a NewType of Any (`DataClassType`) that no class is declared as
    types: Any = classes
    return RecipeParser(types, prog=prog, description=description, epilog=epilog)


def recipe_and_task(argv: list[str], prog: str, flag: str = "--config") -> tuple[dict, Task, list[str]]:
    """(the recipe, its task, `argv`) from `flag` and `--task` (`utils.recipe_files.recipe_and_task_name`); an
    unknown task is refused with the allowed ones."""
    recipe, name, argv = recipe_and_task_name(argv, prog, flag)
    return recipe, get_task(name), argv


def parse(parser: RecipeParser, argv: list[str] | None, with_config: bool = True) -> tuple:
    """
    The parser's dataclasses from `argv` (and a `--config` YAML when `with_config`); an unknown key or flag is
    refused with the closest known fields, so a typo in a recipe never passes as a default.
    """
    argv = list(argv or [])
    # the dataclasses, then the strings they left (TRL types the whole tuple as dataclasses)
    from_recipe: list[str]
    from_flags: list[str]
    if with_config:
        out = parser.parse_args_and_config(argv, return_remaining_strings=True, separate_remaining_strings=True)
        parsed, from_recipe, from_flags = out[:-2], out[-2], out[-1]
    else:
        out = parser.parse_args_into_dataclasses(argv, return_remaining_strings=True)
        parsed, from_recipe, from_flags = out[:-1], [], out[-1]
    for source, unknown in (("flag", from_flags), ("recipe key", from_recipe)):
        if unknown:
            raise ValueError(
                f"Unknown {source}(s): {_hints(unknown, parser.known_fields())}. Recipe keys and flags "
                "are the fields that `--help` lists."
            )
    return tuple(parsed)


def _hints(unknown: list[str], known: list[str]) -> str:
    """The unknown names of `unknown` (argv strings: `--name`, values) with the closest known fields."""
    names = [a.lstrip("-").split("=", 1)[0] for a in unknown if a.startswith("-")]
    if not names:
        return ", ".join(f"`{a}`" for a in unknown)
    hints = []
    for name in dict.fromkeys(names):
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hints.append(f"`{name}` (did you mean {' / '.join(f'`{c}`' for c in close)}?)" if close else f"`{name}`")
    return ", ".join(hints)


def load_recipe(path: str, overrides: list[str] | tuple[str, ...] = ()) -> tuple[Task, Recipe]:
    """(task, recipe) of the YAML recipe at `path` with `--field value` `overrides`, as `constrained-sft train`
    reads them."""
    _, task, argv = recipe_and_task(["--config", shipped.find(path, "path"), *overrides], "recipe")
    return task, task.recipe(parse(dataclass_parser(task.parser_classes(), "recipe", ""), argv))
