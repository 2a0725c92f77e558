"""
`constrained-sft eval exits`: self-speculative decoding, the first l layers drafting for the full model, against plain
greedy decoding, per model and exit layer (see `constrained_sft.evaluation.exits`).
"""

from __future__ import annotations

from .base import Command


class ExitsCommand(Command):
    name = "exits"
    help = (
        "self-speculative decoding (the first l layers draft, the full model verifies; batch 1): speed-up over greedy "
        "decoding with an interval over prompts, acceptance rate, and the check that the tokens equal greedy's"
    )

    def run(self, argv: list[str], prog: str) -> int:
        from ..evaluation.exits import ExitsArguments, run
        from ..tasks.recipes import dataclass_parser, parse
        from ..utils.written_record import recording

        parser = dataclass_parser(
            (ExitsArguments,), prog, f"{prog} --models DIR [DIR ...] --output_dir DIR: {self.help}."
        )
        (args,) = parse(parser, argv, with_config=False)
        with recording(args.output_dir):  # every file written there recorded; a user's edit kept
            results = run(args)
        for name, model in results.models.items():
            for layer, r in sorted(model.exits.items()):
                same = "tokens = greedy" if r.identical_to_greedy else "TOKENS DIFFER FROM GREEDY"
                print(
                    f"{name} exit layer {layer}: speed-up {r.speedup:.3f} [{r.speedup_low:.3f}, "
                    f"{r.speedup_high:.3f}], acceptance {r.acceptance_rate:.3f}, {r.tokens_per_second:.1f} "
                    f"tokens/s (greedy {model.plain_tokens_per_second:.1f}); {same}"
                )
        print(f"report: {results.files['html']}")
        return 0
