"""
The `constrained-sft` command line (also `python -m constrained_sft`): parsing arguments, choosing the command and
printing what it returns. Every command is a thin layer over library code: `train` (`train` for causal LMs,
`train_classifier` for `task: classification`, `train_video` for `task: video`, all through `common`), `eval robustness`, `eval generate` and
`eval alpaca` (over `constrained_sft.evaluation`).

May import: anything in the package; nothing imports it but `__main__`.
"""

from __future__ import annotations

import sys
import warnings

USAGE = """usage: constrained-sft <command> [options]

commands:
  train              fine-tune from a YAML recipe: constrained-sft train --config <recipe.yaml> [--field value ...]
  eval robustness    accuracy vs embedding noise, layer curves and descent statistics, with a report
  eval generate      answers to instructions (AlpacaEval or a local file) with embedding noise, alpaca_eval format
  eval alpaca        head-to-head AlpacaEval judging of two generators' answers at each noise level
  sweep              Optuna search of a classification recipe on a validation split; --baseline erm compares the
                     best constrained and ERM configurations on the test split with confidence intervals

Run `constrained-sft <command> --help` for the options of a command."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    # TRL's config always sets `gradient_checkpointing`, which transformers 5 reports as renamed on every run
    warnings.filterwarnings("ignore", message=".*`gradient_checkpointing` is deprecated.*")
    command, rest = argv[0], argv[1:]
    if command == "train":
        from .common import recipe_task

        task = recipe_task(rest)
        if task == "classification":
            from .train_classifier import main as train
        elif task == "sft":
            from .train import main as train
        elif task == "video":
            from .train_video import main as train
        else:
            raise ValueError(f"`task` must be 'sft', 'classification' or 'video', got {task!r}.")
        return train(rest)
    if command == "sweep":
        from .sweep import main as sweep

        return sweep(rest)
    if command == "eval" and rest and rest[0] == "robustness":
        from .eval_robustness import main as robustness

        return robustness(rest[1:])
    if command == "eval" and rest and rest[0] == "generate":
        from .eval_generate import main as generate

        return generate(rest[1:])
    if command == "eval" and rest and rest[0] == "alpaca":
        from .eval_alpaca import main as alpaca

        return alpaca(rest[1:])
    print(f"constrained-sft: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


def console(argv: list[str] | None = None) -> int:
    """
    The `constrained-sft` executable: `main`, with a refused input (every error of the package is a `ValueError` or
    `FileNotFoundError` that names the field and its allowed values) printed as one line instead of a stack trace.
    `CONSTRAINED_SFT_TRACEBACK=1` shows the trace.
    """
    import os

    try:
        return main(argv)
    except (ValueError, FileNotFoundError) as error:
        if os.environ.get("CONSTRAINED_SFT_TRACEBACK"):
            raise
        print(f"constrained-sft: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(console())
