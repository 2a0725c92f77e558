"""
`constrained-sft eval alpaca`: head-to-head AlpacaEval judging of two generators at each noise level (see
`constrained_sft.evaluation.alpaca`).
"""

from __future__ import annotations

from trl import TrlParser

from ..evaluation.alpaca import AlpacaArguments, quiet_alpaca_eval, result_lines, run
from .common import parse


def main(argv: list[str]) -> int:
    (args,) = parse(TrlParser((AlpacaArguments,)), argv, with_config=False)
    quiet_alpaca_eval()
    print("\n".join(result_lines(run(args))))
    return 0
