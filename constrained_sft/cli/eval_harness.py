"""
`constrained-sft eval harness`: lm-evaluation-harness tasks at each noise level, per model, arms compared with paired
intervals (see `constrained_sft.evaluation.harness`). Needs the `harness` extra.
"""

from __future__ import annotations

from .base import Command


class HarnessCommand(Command):
    name = "harness"
    help = (
        "lm-evaluation-harness tasks (IFEval, MMLU, your own YAML; `offline` for the shipped ones) under embedding "
        "noise at each gamma; arms compared with paired intervals; resumes from finished cells"
    )

    def run(self, argv: list[str], prog: str) -> int:
        try:
            from ..evaluation.harness.arguments import HarnessArguments
        except ImportError as error:  # pragma: no cover (the dev install has it)
            raise ValueError(
                f"`eval harness` needs lm-eval: pip install 'constrained-sft[harness]' ({error})."
            ) from None
        from ..evaluation.harness.command import run
        from ..tasks.recipes import dataclass_parser, parse
        from ..utils.written_record import recording

        description = f"{prog} --models DIR [DIR ...] --tasks TASK [TASK ...] --output_dir DIR: {self.help}."
        parser = dataclass_parser((HarnessArguments,), prog, description)
        (args,) = parse(parser, argv, with_config=False)
        with recording(args.output_dir):  # every file written there recorded; a user's edit kept
            results = run(args)
        for name, comparison in results.comparisons.items():
            for stat, row in comparison.rows.items():
                d = row.difference
                print(f"{name} {stat}: {d.estimate:+.4f} [{d.low:+.4f}, {d.high:+.4f}] {d.verdict}")
        print(f"report: {results.files['markdown']}")
        return 0
