"""
Dual optimizers compared on the demo recipe (SmolLM2-135M on ShareGPT, 40 steps): a `constrained-sft study` trains
the arms with per-step logs, then this script measures them. Train (about 70 min on 2 CPU cores for 5 arms x 3 seeds):

    constrained-sft study --config recipes/smollm2-135m/sharegpt/constrained.yaml \\
        --erm_config recipes/smollm2-135m/sharegpt/erm.yaml --arm adam=recipes/smollm2-135m/sharegpt/adam-dual.yaml \\
        --arm nupi=recipes/smollm2-135m/sharegpt/nupi.yaml \\
        --arm augmented-lagrangian=recipes/smollm2-135m/sharegpt/augmented-lagrangian.yaml \\
        --reference constrained --study_dir outputs/smollm2-study-dual --training_seeds 3 --eval_size 48 \\
        --evaluate_before_training false --logging_steps 1 --stage train
    python benchmarks/dual_optimizers_study.py --study_dir outputs/smollm2-study-dual

Per run, from its trainer_state.json (`logging_steps` 1: every step's slack and multipliers): the same measures as
benchmarks/dual_optimizers.py (settling step, strict and relaxed; overshoot; total variation). Per arm, on the
study's held-out conversations, clean (gamma 0): token accuracy and the final layer's loss f_L, each arm minus ERM
and minus SGD ascent (the `constrained` arm) with the library's paired bootstrap over training seeds and sequences
(the study's intervals). The held-out evaluation is saved in `<study_dir>/robustness-clean` and reused on a rerun.
Writes benchmarks/results/dual_optimizers_smollm2_cpu.json (or `--output`) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dual_optimizers import RESULTS, markdown, method_row, run_metrics  # noqa: E402  (its measures and table)

ARMS = {"constrained": "sgd", "adam": "adam", "nupi": "nupi", "augmented-lagrangian": "augmented_lagrangian"}
RECIPE = "recipes/smollm2-135m/sharegpt/constrained.yaml"


def logged_run(path: str) -> dict:
    """One run's per-step multipliers and slack `[T, C]` from its trainer_state.json (steps that logged them)."""
    with open(path) as f:
        history = json.load(f)["log_history"]
    rows = [r for r in history if any(k.startswith("slack/") for k in r)]
    keys = sorted(k.removeprefix("slack/") for k in rows[0] if k.startswith("slack/"))
    if len(rows) != rows[-1]["step"]:
        raise SystemExit(f"{path}: {len(rows)} logged steps of {rows[-1]['step']}; train with --logging_steps 1.")
    return {
        "dual": [[r.get(f"dual/{k}", 0.0) for k in keys] for r in rows],
        "slack": [[r[f"slack/{k}"] for k in keys] for r in rows],
    }


def held_out(study_dir: str, folders: dict[str, list[str]], recipe_path: str, eval_size: int, n_boot: int):
    """`eval robustness` of every model at gamma 0 on the study's held-out rows (reused when already saved)."""
    from constrained_sft.config import training_level
    from constrained_sft.evaluation import RobustnessArguments, run, saved_results
    from constrained_sft.tasks.recipes import load_recipe

    task, recipe = load_recipe(recipe_path, ["--eval_size", str(eval_size)])
    arms = {arm: [(f"{arm}/seed{s}", p) for s, p in enumerate(paths)] for arm, paths in folders.items()}
    out = os.path.join(study_dir, "robustness-clean")
    pairs = [(arm, "erm") for arm in ARMS]
    if saved := saved_results(out, arms, [0.0], 1, task, pairs, n_boot):
        return saved
    settings = RobustnessArguments(
        task=task.name, output_dir=out, gammas=[0.0], train_gamma=training_level(recipe.training.noise_gamma),
        seeds=1, batch_size=recipe.training.per_device_eval_batch_size, max_length=recipe.training.max_length,
        bootstrap_samples=n_boot,
    )  # fmt: skip
    return run(settings, recipe.script, arms=arms, pairs=pairs)


def differences(results, a: str, b: str, n_boot: int) -> dict[str, list[float]]:
    """Token accuracy and f_L at gamma 0, arm a - arm b: [estimate, low, high] of the paired bootstrap."""
    from constrained_sft.evaluation import Statistic, paired_bootstrap
    from constrained_sft.evaluation.robustness import arm_scores

    stats = [
        Statistic("accuracy", lambda s: s["correct"][..., 0] / s["count"][..., 0]),
        Statistic("f_L", lambda s: s["loss"][..., 0] / s["count"][..., 0], higher_is_better=False),
    ]
    scores = [arm_scores(results, results.arms[arm]) for arm in (a, b)]
    out = paired_bootstrap(*scores, stats, n_boot=n_boot)
    return {k: [v.estimate, v.low, v.high] for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study_dir", required=True, help="A study trained with the arms above, --logging_steps 1.")
    parser.add_argument("--recipe", default=RECIPE, help="The study's constrained recipe (its held-out rows).")
    parser.add_argument("--eval_size", type=int, default=48, help="The study's --eval_size (its held-out rows).")
    parser.add_argument("--resilience", type=float, default=0.5, help="The recipes' resilience (relaxed settling).")
    parser.add_argument("--window", type=int, default=5, help="Trailing steps averaged by the settling measure.")
    parser.add_argument("--bootstrap_samples", type=int, default=2000)
    parser.add_argument("--output", default=os.path.join(RESULTS, "dual_optimizers_smollm2_cpu.json"))
    args = parser.parse_args()
    started = time.time()
    folders = {arm: sorted(glob.glob(os.path.join(args.study_dir, "train", arm, "seed*"))) for arm in ("erm", *ARMS)}
    counts = {arm: len(paths) for arm, paths in folders.items()}
    if min(counts.values()) == 0 or len(set(counts.values())) > 1:
        raise SystemExit(f"{args.study_dir}: every arm needs the same number (> 0) of trained seeds, found {counts}.")
    results = held_out(args.study_dir, folders, args.recipe, args.eval_size, args.bootstrap_samples)
    rows, runs = [], {}
    for arm, method in ARMS.items():
        per_seed = []
        for s, folder in enumerate(folders[arm]):
            run = logged_run(os.path.join(folder, "trainer_state.json"))
            level = results.models[f"{arm}/seed{s}"].summary.levels[0]
            run.update(f_L=level.loss_mean, accuracy=level.metric_mean)
            per_seed.append(run_metrics(run, args.resilience, args.window))
        runs[method] = per_seed
        row = method_row(method, per_seed) | {"seeds": len(per_seed)}
        row["final_dual_max"] = float(np.mean([r["final_dual_max"] for r in per_seed]))
        for ref in ("erm", "constrained") if arm != "constrained" else ("erm",):
            name = "erm" if ref == "erm" else "sgd"
            for stat, value in differences(results, arm, ref, args.bootstrap_samples).items():
                row[f"{stat}_minus_{name}"] = value
        rows.append(row)
    result = {
        "settings": {**vars(args), "arms": ARMS, "held_out_sequences": len(
            results.models["erm/seed0"].scores["0.0"]["count"])},
        "rows": rows,
        "runs": runs,
        "wall_seconds_measure": round(time.time() - started, 1),
        "machine": f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}",
    }  # fmt: skip
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(result, f, indent=1)
    print(markdown(rows, len(folders["erm"])))
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
