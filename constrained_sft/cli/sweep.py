"""
`constrained-sft sweep`: hyperparameter search for a classification recipe, and the constrained-vs-ERM comparison.

    constrained-sft sweep --config recipes/minilm/rotten-tomatoes/constrained.yaml \
        --space recipes/minilm/rotten-tomatoes/sweep.yaml --n_trials 20 --baseline erm

The recipe's keys (data, model, `ConstrainedConfig`) set everything a trial does not search; the sweep's own options
are the fields of `SweepArguments`.
"""

from __future__ import annotations

from trl import ModelConfig, TrlParser

from ..config import ConstrainedConfig
from ..sweep import SweepArguments, run
from ..sweep.compare import table
from .common import parse, recipe_task
from .train_classifier import ClassifierScriptArguments


def main(argv: list[str] | None = None) -> int:
    task = recipe_task(list(argv or []))
    if task != "classification":
        raise ValueError(
            f"`task` must be 'classification' for `constrained-sft sweep` (it searches classification recipes), got "
            f"{task!r}. Sweeping SFT recipes is not supported yet."
        )
    parser = TrlParser((SweepArguments, ClassifierScriptArguments, ModelConfig, ConstrainedConfig))
    settings, script_args, model_args, training_args = parse(parser, argv)
    out = run(settings, script_args, model_args, training_args)
    for arm, info in out["arms"].items():
        best = info["best"]
        print(
            f"{arm}: {len(info['trials'])} trials; best "
            + ("none" if best is None else f"{best['value']:.4f} (trial {best['trial']})")
        )
    if "comparison" in out:
        print(table(out["comparison"]))
    print(f"report: {settings.sweep_dir}/report.md")
    return 0
