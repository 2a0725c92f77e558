"""
`constrained-sft eval generate`: answers to instructions with embedding noise, one alpaca_eval-format file per model
and level (see `constrained_sft.evaluation.alpaca.generate`).
"""

from __future__ import annotations

from .base import Command


class GenerateCommand(Command):
    name = "generate"
    help = "answers to instructions (AlpacaEval or a local file) with embedding noise, in alpaca_eval's format"

    def run(self, argv: list[str], prog: str) -> int:
        from ..evaluation.alpaca.generate import GenerateArguments, run
        from ..tasks.recipes import dataclass_parser, parse
        from ..utils.written_record import recording

        parser = dataclass_parser((GenerateArguments,), prog, f"{prog} --model DIR --output_dir DIR: {self.help}.")
        (args,) = parse(parser, argv, with_config=False)
        with recording(args.output_dir):  # every file written there recorded; a user's edit kept
            levels = run(args)
        for gamma, level in levels.items():
            print(f"gamma={gamma}: {level.path}")
        return 0
