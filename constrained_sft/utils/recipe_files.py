"""
The recipe files of a command line, found and read before the training stack loads: a local path or a shipped
recipe's name (`constrained-sft recipes`), read as a YAML mapping of field names to values. A command checks them
first, so a mistyped `--config` is answered in a tenth of a second instead of after the ~5-10 s it takes to import
torch, transformers, peft and TRL (`tests/cli/test_imports.py` checks that such a refusal loads none of them).
Parsing the recipe into the task's dataclasses is `tasks.recipes`'s, once the stack is loaded.
"""

from __future__ import annotations

import argparse

from . import shipped
from .files import read_yaml
from .types import JSONRead

HELP = ("-h", "--help")
SPACE_FLAG = "--space"  # the sweep's search space: a recipe file of another shape (`sweep.space`)


def read_recipe(path: str | None, flag: str = "--config") -> JSONRead:
    """The YAML recipe at `path` ({} without one), refused unless it is a mapping of field names to values."""
    if path is None:
        return {}
    recipe = read_yaml(shipped.find(path, flag), flag)  # a local file, else a shipped name (else refused)
    if not isinstance(recipe, dict):
        got = "an empty file" if recipe is None else f"a {type(recipe).__name__}"
        raise ValueError(
            f"`{flag}` {path} must be a YAML mapping of field names to values (`constrained-sft recipes` lists the shipped ones), got {got}."
        )
    if shipped.yaml_kind(recipe) == "search space":
        raise ValueError(
            f"`{flag}` {path} is a search space (sections {sorted(recipe)} of field ranges, what `sweep --space` "
            "reads), not a recipe; give a recipe of field names and values (`constrained-sft recipes` lists both)."
        )
    return recipe


def with_shipped(argv: list[str], flags: tuple[str, ...], arm_flag: str | None = None) -> list[str]:
    """
    `argv` with the recipe files `flags` name (`--flag VALUE`, `--flag=VALUE`; `arm_flag`: `NAME=VALUE` items) given
    as paths: a local file stays as given, a shipped recipe's name (`constrained-sft recipes`) becomes its installed
    path, so TRL's parser and every later read see a file. An unknown name, or a recipe that is not a mapping of
    field names (`read_recipe`), is refused naming its flag (under `--help` it is left for the help to ignore).
    """
    loose = any(a in HELP for a in argv)

    def path(value: str, flag: str) -> str:
        try:
            if flag == SPACE_FLAG:
                return shipped.find(value, flag, what="search space")
            read_recipe(value, flag)  # refused naming the value as given
            return shipped.find(value, flag, what="recipe")
        except ValueError:
            if loose:
                return value
            raise

    def arm(item: str) -> str:
        name, sep, value = item.partition("=")
        return f"{name}={path(value, f'{arm_flag} {name}')}" if sep and value else item

    out, current = [], None  # current: the flag whose values follow
    for token in argv:
        flag, eq, value = token.partition("=")
        if token.startswith("--"):
            current = flag if flag in (*flags, arm_flag) else None
            if eq and current:
                out.append(f"{flag}={arm(value) if flag == arm_flag else path(value, flag)}")
                current = flag if flag == arm_flag else None
                continue
            out.append(token)
        elif arm_flag and current == arm_flag:
            out.append(arm(token))  # `--arm a=x b=y`: every item until the next flag
        elif current:
            out.append(path(token, current))
            current = None
        else:
            out.append(token)
    return out


def recipe_and_task_name(argv: list[str], prog: str, flag: str = "--config") -> tuple[JSONRead, str | None, list[str]]:
    """
    (the recipe, its task's name, `argv`) from `flag` and `--task` (the last given, as the parser reads it; else the
    recipe's `task`; None: neither names one, the default). A flag without its value is argparse's error. With
    `--help`, a recipe that cannot be read is left out of `argv`, so the help shows whatever the recipe says.
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
    return recipe, known.task or recipe.get("task"), argv
