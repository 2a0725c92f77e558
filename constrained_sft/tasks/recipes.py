"""
Recipes from the command line or a script: a YAML file of field names and values plus `--field value` overrides,
parsed by TRL's `TrlParser` into the dataclasses of the recipe's task. Everything is checked before any work: a flag
without its value is argparse's error, a recipe that is not a mapping is refused naming the file, an unknown key or
flag is refused with the closest known fields, so a typo never passes as a default.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re

from trl import TrlParser

from ..utils import percent, read_yaml
from . import DEFAULT_TASK, Recipe, Task, get_task

HELP = ("-h", "--help")


def escape_percent(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """argparse formats help text with `%`: a literal '%' in a field's help ("10%") must be written '%%' (help
    already written for argparse, '%%' or '%(default)s', is kept)."""
    for action in parser._actions:
        if action.help:
            action.help = percent(action.help)
    return parser


def dataclass_parser(classes: tuple[type, ...], prog: str, description: str, epilog: str | None = None) -> TrlParser:
    """A `TrlParser` over `classes` whose `--help` shows `prog`, what it does, and the fields with their defaults."""
    parser = TrlParser(classes, prog=prog, description=description, epilog=epilog)
    return escape_percent(parser)


def read_recipe(path: str | None, flag: str = "--config") -> dict:
    """The YAML recipe at `path` ({} without one), refused unless it is a mapping of field names to values."""
    if path is None:
        return {}
    if not os.path.isfile(path):
        raise ValueError(f"`{flag}` {path!r} is not a file; give the path of a YAML recipe (see recipes/).")
    recipe = read_yaml(path, flag)
    if recipe is not None and not isinstance(recipe, dict):
        raise ValueError(
            f"`{flag}` {path} must be a YAML mapping of field names to values (see recipes/), got a "
            f"{type(recipe).__name__}."
        )
    return recipe or {}


def recipe_and_task(argv: list[str], prog: str, flag: str = "--config") -> tuple[dict, Task, list[str]]:
    """
    (the recipe, its task, `argv`) from `flag` and `--task` (the last given, as the parser reads it; else the
    recipe's `task`; else SFT). A flag without its value is argparse's error. With `--help`, a recipe that cannot be
    read is left out of `argv`, so the help shows whatever the recipe says.
    """
    pre = argparse.ArgumentParser(prog=prog, add_help=False, allow_abbrev=False)
    pre.add_argument(flag)
    pre.add_argument("--task")
    known, _ = pre.parse_known_args(argv)
    path = getattr(known, flag.lstrip("-"))
    try:
        recipe = read_recipe(path, flag)
    except ValueError:
        if not any(a in HELP for a in argv):
            raise
        recipe, argv = {}, [a for i, a in enumerate(argv) if a != flag and (i == 0 or argv[i - 1] != flag)]
    return recipe, get_task(known.task or recipe.get("task", DEFAULT_TASK)), argv


def parse(parser, argv: list[str] | None, with_config: bool = True) -> tuple:
    """
    The parser's dataclasses from `argv` (and a `--config` YAML when `with_config`); an unknown key or flag is
    refused with the closest known fields, so a typo in a recipe never passes as a default.
    """
    argv = list(argv or [])
    try:
        if with_config:
            return parser.parse_args_and_config(argv)
        return parser.parse_args_into_dataclasses(argv)
    except ValueError as error:
        text = str(error)
        source = "recipe key" if "config file" in text else "flag"
        if "not used by the HfArgumentParser" not in text and "Unknown arguments" not in text:
            raise
        known = sorted({action.dest for action in parser._actions if action.dest != "help"})
        hints = []
        for name in dict.fromkeys(re.findall(r"'--([A-Za-z_][\w.-]*)'", text)):
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            hints.append(f"`{name}` (did you mean {' / '.join(f'`{c}`' for c in close)}?)" if close else f"`{name}`")
        raise ValueError(
            f"Unknown {source}(s): {', '.join(hints) or text}. Recipe keys and flags are the fields that `--help` "
            "lists."
        ) from None


def load_recipe(path: str, overrides: list[str] | tuple[str, ...] = ()) -> tuple[Task, Recipe]:
    """(task, recipe) of the YAML recipe at `path` with `--field value` `overrides`, as `constrained-sft train`
    reads them."""
    _, task, argv = recipe_and_task(["--config", path, *overrides], "recipe")
    return task, task.recipe(parse(dataclass_parser(task.parser_classes(), "recipe", ""), argv))
