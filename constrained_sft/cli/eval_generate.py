"""
`constrained-sft eval generate`: answers to instructions with embedding noise, one alpaca_eval-format file per model
and level (see `constrained_sft.evaluation.generate`).
"""

from __future__ import annotations

from trl import TrlParser

from ..evaluation.generate import GenerateArguments, run
from .common import parse


def main(argv: list[str]) -> int:
    (args,) = parse(TrlParser((GenerateArguments,)), argv, with_config=False)
    for gamma, path in run(args).items():
        print(f"gamma={gamma}: {path}")
    return 0
