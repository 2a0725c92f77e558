"""
`constrained-sft eval alpaca`: head-to-head AlpacaEval judging of two generators at each noise level (see
`constrained_sft.evaluation.alpaca`).
"""

from __future__ import annotations

from .base import Command


class AlpacaCommand(Command):
    name = "alpaca"
    help = "head-to-head AlpacaEval judging of two generators' answers at each noise level"

    def run(self, argv: list[str], prog: str) -> int:
        from ..evaluation.alpaca import AlpacaArguments, quiet_alpaca_eval, result_lines, run
        from ..tasks.recipes import dataclass_parser, parse
        from ..utils.written_record import recording

        parser = dataclass_parser((AlpacaArguments,), prog, f"{prog} --generations DIR --output_dir DIR: {self.help}.")
        (args,) = parse(parser, argv, with_config=False)
        quiet_alpaca_eval()
        with recording(args.output_dir):  # every file written there recorded; a user's edit kept
            print("\n".join(result_lines(run(args))))
        return 0
