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

        parser = dataclass_parser((GenerateArguments,), prog, f"{prog} --model DIR --output_dir DIR: {self.help}.")
        (args,) = parse(parser, argv, with_config=False)
        for gamma, level in run(args).items():
            print(f"gamma={gamma}: {level.path}")
        return 0
