"""
What every command shares, in TRL's shape (`trl/cli`): a `Command` registers its subparser and runs on the rest of
the command line; its options are the fields of library dataclasses, parsed by the library's recipe parser
(`constrained_sft.tasks.recipes`: `--config` YAML recipes, `--help` from argparse itself).

Registering a command imports nothing but argparse: each command imports what it runs (the training stack, the
sweep's database driver, alpaca_eval) inside `run`, so `constrained-sft --help` loads no torch and `train` never loads
the sweep's or the judge's dependencies (`tests/cli/test_imports.py`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from ..utils.help_text import percent

if TYPE_CHECKING:
    import argparse

    from transformers import TrainingArguments

    from ..config import ProcessArguments
    from ..tasks import Task
    from ..tasks.recipes import RecipeParser

# argparse's `add_subparsers()` handle, which argparse's stubs name privately
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

__all__ = ["Command", "Group", "comparison_parser", "other_tasks", "own_process"]


class Command(ABC):
    """A top-level command (or a subcommand of a group): its name, one line of help, and how it runs."""

    name: str
    help: str

    def register(self, subparsers: Subparsers) -> None:
        """A subparser without options of its own: the command parses the rest of the line itself."""
        subparsers.add_parser(self.name, help=percent(self.help), add_help=False)

    @abstractmethod
    def run(self, argv: list[str], prog: str) -> int:
        """Parse `argv` (everything after the command's name) and run; `prog` is how the command is invoked."""


class Group(Command):
    """A command whose first argument names one of its subcommands (`constrained-sft eval robustness ...`)."""

    commands: tuple[Command, ...] = ()

    def register(self, subparsers: Subparsers) -> None:
        self.parser = subparsers.add_parser(self.name, help=percent(self.help), description=percent(self.help))
        sub = self.parser.add_subparsers(title="subcommands", metavar="<subcommand>", dest="subcommand")
        for command in self.commands:
            command.register(sub)

    def run(self, argv: list[str], prog: str) -> int:
        by_name = {c.name: c for c in self.commands}
        if not argv or argv[0] not in by_name:
            self.parser.parse_args(argv)  # prints help (-h), or argparse's error for an unknown subcommand
            self.parser.print_help()  # no subcommand at all
            return 0
        return by_name[argv[0]].run(argv[1:], f"{prog} {argv[0]}")


def comparison_parser(options: type, task: Task, prog: str, description: str) -> Callable[[], RecipeParser]:
    """The parser of a command that compares recipes (`study`, `sweep`): its `options`, the Slurm launcher's and the
    process's, then the task's recipe fields. A maker, not a parser: one parser per recipe, since a parser keeps the
    keys of the recipe it read as its defaults."""
    from ..config import ProcessArguments
    from ..tasks.recipes import dataclass_parser
    from ..utils.slurm import SlurmArguments

    def parser() -> RecipeParser:
        classes = (options, SlurmArguments, ProcessArguments, *task.parser_classes())
        return dataclass_parser(classes, prog, description, other_tasks(prog, task))

    return parser


def other_tasks(command: str, task: Task) -> str:
    """The help epilog: which task's fields are shown, and how to see another's."""
    from ..tasks import TASKS

    others = [name for name in TASKS if name != task.name]
    return (
        f"These are the fields of `task: {task.name}` recipes (YAML keys and flags alike). Another task's: "
        + ", ".join(f"`{command} --task {n} --help`" for n in others)
        + "."
    )


def own_process(process: ProcessArguments, training: TrainingArguments) -> None:
    """
    The command's process settings (`config.ProcessArguments`), applied before the task runs: the command owns its
    process, which a library never changes on its own. `host_allocator: reuse` keeps freed host memory for CPU
    training (`training`: the run's config, which says whether it trains on the CPU). The training stack is imported
    by now (~500k objects that live as long as the process): they are frozen out of the garbage collector's reach
    (`gc.freeze`), so every later collection, automatic or the ~2 full ones each run's end asks for (accelerate's
    `free_memory`, `tasks.training.finish`: ~0.5 s each on 2 cores), walks only what the command made since.
    """
    import gc

    import torch

    gc.collect()
    gc.freeze()

    if process.host_allocator == "reuse" and (training.use_cpu or not torch.cuda.is_available()):
        from ..trainers.host_allocator import reuse_freed_host_memory

        reuse_freed_host_memory()
