"""
`constrained-sft eval alpaca`: head-to-head AlpacaEval judging of two generators at each noise level (see
`constrained_sft.evaluation.alpaca`).
"""

from __future__ import annotations

from trl import TrlParser

from ..evaluation.alpaca import AlpacaArguments, quiet_alpaca_eval, result_lines, run


def main(argv: list[str]) -> int:
    (args,) = TrlParser((AlpacaArguments,)).parse_args_into_dataclasses(argv)
    quiet_alpaca_eval()
    print("\n".join(result_lines(run(args))))
    return 0
