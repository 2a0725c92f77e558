"""
`constrained-sft eval robustness`: accuracy against embedding noise, layerwise curves and descent statistics for
one or more models on a held-out set, written as results.json / results.csv / PNG plots / report.html.

    constrained-sft eval robustness --recipe recipes/smollm2-135m/sharegpt/constrained.yaml \\
        --models outputs/smollm2-135m-sharegpt-constrained outputs/smollm2-135m-sharegpt-erm \\
        --names constrained erm --output_dir outputs/robustness

With `--recipe`, the held-out rows are the ones the training run carved off (same data fields and seed).
"""

from __future__ import annotations

import dataclasses

import yaml
from trl import TrlParser

from ..data import ClassificationDataArguments, DataArguments
from ..data.video import VideoDataArguments
from ..evaluation.robustness import RobustnessArguments, run
from .common import parse


def main(argv: list[str]) -> int:
    recipe: dict = {}
    if "--recipe" in argv:
        with open(argv[argv.index("--recipe") + 1]) as f:
            recipe = yaml.safe_load(f) or {}
    task = argv[argv.index("--task") + 1] if "--task" in argv else recipe.get("task", "sft")
    data_class = {"classification": ClassificationDataArguments, "video": VideoDataArguments}.get(task, DataArguments)
    parser = TrlParser((RobustnessArguments, data_class))
    if recipe:
        data_fields = {f.name for f in dataclasses.fields(data_class)}
        defaults = {k: v for k, v in recipe.items() if k in data_fields}
        if recipe.get("max_length"):  # evaluate with the truncation the model was trained with
            defaults["max_length"] = recipe["max_length"]
        defaults["task"] = task
        parser.set_defaults_with_config(**defaults)
    args, data_args = parse(parser, argv, with_config=False)
    if task == "video":
        return _video(args, data_args, recipe)
    results = run(args, data_args, recipe)
    for name, model in results["models"].items():
        s = model["summary"]
        print(
            f"{name}: AUC {s['auc']:.4f}, ID accuracy {s['id_accuracy']:.4f}, OOD accuracy {s['ood_accuracy']:.4f}, "
            f"descent share {s['descent_share']:.4f}"
        )
    print(f"report: {results['files']['html']}")
    return 0


def _video(args, data_args, recipe: dict) -> int:
    from ..evaluation.video_report import run_video

    results = run_video(args, data_args, recipe)
    for name, model in results["models"].items():
        s = model["summary"]
        rmse = ", ".join(f"{r['gamma']:g}: {r['rmse_mean']:.2f}" for r in s["levels"])
        print(
            f"{name}: RMSE by gamma {{{rmse}}}; ID {s['id_rmse']:.2f}, OOD {s['ood_rmse']:.2f}, descent share {s['descent_share']:.3f}"
        )
    if d := results.get("differences"):
        print(d["label"])
        for r in d["per_gamma"] + [{"gamma": k.upper(), **d[k]} for k in ("id", "ood") if k in d]:
            print(f"  {r['gamma']}: {r['estimate']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}] {r['verdict']}")
    print(f"report: {results['files']['html']}")
    return 0
