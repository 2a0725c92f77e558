"""
The `constrained-sft` command line (also `python -m constrained_sft`), in TRL's shape: argparse subparsers, one
`Command` per verb (`train`, `sweep`, `study`, `recipes`, the `eval` group of `robustness`, `generate`, `alpaca`, `exits`,
`harness`), each parsing the fields of library dataclasses and printing what the library returns. Nothing here knows a task: the recipe's `task`
is looked up in `constrained_sft.tasks`. Importing this module loads no torch: each command imports what it runs,
and a command's `--help` is printed from a cache once built (`help_cache`).

May import: anything in the package; nothing imports it but `__main__`.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from ..version import VERSION
from .base import Command, Group
from .eval_alpaca import AlpacaCommand
from .eval_exits import ExitsCommand
from .eval_generate import GenerateCommand
from .eval_harness import HarnessCommand
from .eval_robustness import RobustnessCommand
from .help_cache import cached_help, wants_help
from .recipes import RecipesCommand
from .study import StudyCommand
from .sweep import SweepCommand
from .train import TrainCommand

PROG = "constrained-sft"


class EvalGroup(Group):
    name = "eval"
    help = "measure trained models: robustness to noise with intervals, noisy generation, AlpacaEval judging"
    commands = (RobustnessCommand(), GenerateCommand(), AlpacaCommand(), ExitsCommand(), HarnessCommand())


COMMANDS: tuple[Command, ...] = (TrainCommand(), EvalGroup(), SweepCommand(), StudyCommand(), RecipesCommand())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Constrained fine-tuning for the Hugging Face stack: every layer must reduce the loss.",
        epilog=f"Run `{PROG} <command> --help` for the options of a command.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    sub = parser.add_subparsers(title="commands", metavar="<command>", dest="command")
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    by_name = {c.name: c for c in COMMANDS}
    if not argv:
        parser.print_help()
        return 0
    if argv[0] not in by_name:
        parser.parse_args(argv)  # --help / --version, or argparse's error for an unknown command (exit 2)
        return 2
    # TRL's config always sets `gradient_checkpointing`, which transformers 5 reports as renamed on every run
    warnings.filterwarnings("ignore", message=".*`gradient_checkpointing` is deprecated.*")
    command = by_name[argv[0]]
    if wants_help(argv):
        return cached_help(argv, lambda: command.run(argv[1:], f"{PROG} {argv[0]}"))
    return command.run(argv[1:], f"{PROG} {argv[0]}")


def console(argv: list[str] | None = None) -> int:
    """
    The `constrained-sft` executable: `main`, with a refused input (every error of the package is a `ValueError` or
    `FileNotFoundError` that names the field and its allowed values) printed as one line instead of a stack trace.
    `CONSTRAINED_SFT_TRACEBACK=1` shows the trace. Output piped to a reader that stops early (`| head`) ends the
    command quietly with 141, as a shell tool does on SIGPIPE, instead of a `BrokenPipeError` trace.
    """
    import os

    from ..utils.redact import redact_text

    try:
        return main(argv)
    except (ValueError, FileNotFoundError) as error:
        if os.environ.get("CONSTRAINED_SFT_TRACEBACK"):
            raise
        print(f"{PROG}: error: {redact_text(str(error))}", file=sys.stderr)  # a URL's key never printed
        return 2
    except KeyboardInterrupt as stopped:  # Ctrl-C: the one line the command had to say (what keeps running), no trace
        if os.environ.get("CONSTRAINED_SFT_TRACEBACK"):
            raise
        print(f"\n{PROG}: {stopped}" if str(stopped) else f"\n{PROG}: interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as a shell tool ends on Ctrl-C
    except BrokenPipeError:  # Python's documented recipe (`signal` docs): nothing more goes to the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # SIGPIPE


if __name__ == "__main__":
    sys.exit(console())
