"""
`constrained-sft recipes`: the recipes, search spaces and accelerate launch configs that install with the package,
torchtune's `tune ls` / `tune cp` for them.

    constrained-sft recipes                       # list them: name, objective, model, purpose
    constrained-sft recipes cp smollm2-135m/sharegpt/constrained my.yaml
    constrained-sft train --config smollm2-135m/sharegpt/constrained --max_steps 10
    accelerate launch --config_file "$(constrained-sft recipes path ddp)" -m constrained_sft train --config <recipe>

Every command's `--config` (and `--erm_config`, `--recipe`, `--space`, `--arm NAME=...`) takes a shipped name as
well as a path; a local file wins.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import TYPE_CHECKING

from .base import Command

if TYPE_CHECKING:
    from ..utils.shipped import ShippedFile

NAME_HELP = "a shipped name as `recipes` lists it (smollm2-135m/sharegpt/constrained, ddp) or its checkout path"


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="The recipes, search spaces and accelerate launch configs installed with the package: list "
        "them, copy one to edit, or print where one is installed. Every `--config` takes these names too.",
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="action", metavar="<action>", title="actions")
    sub.add_parser("ls", help="list them (the default): name, objective, model and purpose")
    cp = sub.add_parser("cp", help="copy one into a file or folder to edit (never replaces a file)")
    cp.add_argument("name", help=NAME_HELP)
    cp.add_argument("destination", nargs="?", default=".", help="a file, or a folder to copy into (default: here)")
    path = sub.add_parser("path", help="print where one is installed (for accelerate launch --config_file)")
    path.add_argument("name", help=NAME_HELP)
    return parser


def _rows(files: list[ShippedFile], with_model: bool) -> list[str]:
    """One line per file; on a terminal the purpose is cut to its width, into a pipe or a file it is whole."""
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    name_w = max(len(f.name) for f in files)
    obj_w = max(len(f.objective) for f in files)
    model_w = max(len(f.model) for f in files) if with_model else 0
    rows = []
    for f in files:
        head = f"  {f.name:<{name_w}}  {f.objective:<{obj_w}}  " + (f"{f.model:<{model_w}}  " if with_model else "")
        room = max(width - len(head), 30) if width else len(f.purpose)
        text = f.purpose if len(f.purpose) <= room else f.purpose[: room - 3].rstrip() + "..."
        rows.append((head + text).rstrip())
    return rows


def listing() -> str:
    """What `constrained-sft recipes` prints."""
    from ..utils import shipped

    found = shipped.recipes()
    recipes = [f for f in found if f.kind == "recipe"]
    spaces = [f for f in found if f.kind == "sweep space"]
    lines = ["Recipes (constrained-sft train --config NAME): name, objective, model, purpose"]
    lines += _rows(recipes, with_model=True)
    lines += ["", "Search spaces (constrained-sft sweep --space NAME)"] + _rows(spaces, with_model=False)
    lines += [
        "",
        'Launch configs (accelerate launch --config_file "$(constrained-sft recipes path NAME)" -m constrained_sft '
        "train ...): name, distributed type, purpose",
    ]
    lines += _rows(shipped.launch_configs(), with_model=False)
    lines += ["", f"Installed in {shipped.RECIPES} and {shipped.LAUNCH_CONFIGS}; copy one to edit: recipes cp NAME."]
    return "\n".join(lines)


class RecipesCommand(Command):
    name = "recipes"
    help = "list the recipes and launch configs installed with the package, copy one to edit (ls, cp, path)"

    def run(self, argv: list[str], prog: str) -> int:
        from ..utils import shipped

        args = _parser(prog).parse_args(argv)
        if args.action in (None, "ls"):
            print(listing())
        elif args.action == "cp":
            print(f"copied to {shipped.copy(args.name, args.destination)}")
        else:
            print(shipped.find_shipped(args.name, None))
        return 0
