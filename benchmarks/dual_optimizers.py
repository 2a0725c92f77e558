"""
Dual optimizers compared on one problem: SGD, Adam, nuPI and the augmented Lagrangian (and ERM, the reference for
accuracy), each trained from the same seeds, on the tiny Llama of the tests (4 layers, every layer constrained),
long runs on the successor task:

    python benchmarks/dual_optimizers.py --seeds 8 --steps 300

Per run, from the per-step log (`logging_steps` 1): the first step from which the trailing `--window`-step mean slack
of every constraint stays <= 0 to the end (strict) or <= resilience x lambda (relaxed; the same without resilience);
the multipliers' overshoot (sum over constraints of the largest value minus the final one) and total variation (sum
of |lambda_t+1 - lambda_t| over steps and constraints); the final layer's held-out loss f_L and clean token
accuracy. Per method: the mean over seeds and, for accuracy and f_L, the difference from ERM paired by seed with a
95% percentile bootstrap over seeds, and the same against SGD (plain ascent). Every method gets the same `--dual_lr` (not
tuned per method), or with `--dual_lr_rule C` each seed's C / (mean |slack| at step 1), a rule for the dual learning
rate compared (`--against`) with a fixed one's results file, paired by seed. `--layers` sets the model's depth. Writes
benchmarks/results/dual_optimizers_tiny_cpu.json (or `--output`) and prints a markdown table; `--summarize FILE`
recomputes the table from a results file's stored runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
METHODS = ("sgd", "adam", "nupi", "augmented_lagrangian")


def train(method: str, seed: int, args: argparse.Namespace, output_dir: str, dual_lr: float) -> dict:
    """One run; its per-step multipliers and slack, and the held-out f_L and accuracy at the end."""
    from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
    from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

    config = ConstrainedSFTConfig(
        output_dir=output_dir, report_to="none", bf16=False, use_cpu=True, save_strategy="no", disable_tqdm=True,
        per_device_train_batch_size=4, per_device_eval_batch_size=16, learning_rate=3e-3, logging_steps=1,
        max_steps=args.steps, seed=seed, dataloader_num_workers=0, constraints="none" if method == "erm" else "descent",
        dual_optimizer="sgd" if method == "erm" else method, dual_lr=dual_lr, descent_alpha=args.alpha,
        resilience=args.resilience, layer_loss_tokens=None,
    )  # fmt: skip
    trainer = ConstrainedSFTTrainer(
        model=tiny_causal_lm("llama", num_layers=args.layers, seed=seed),
        args=config,
        train_dataset=successor_dataset(512, seed=seed),
        eval_dataset=successor_dataset(128, seed=10_000),
        processing_class=tiny_tokenizer(),
    )
    trainer.train()
    rows = [r for r in trainer.state.log_history if f"slack/{args.layers}" in r]
    keys = sorted(k.removeprefix("slack/") for k in rows[0] if k.startswith("slack/"))
    evaluation = trainer.evaluate()
    return {
        "dual": [[r.get(f"dual/{k}", 0.0) for k in keys] for r in rows],  # ERM logs no multipliers
        "slack": [[r[f"slack/{k}"] for k in keys] for r in rows],
        "f_L": evaluation[f"eval_layer_loss/{args.layers}"],
        "accuracy": evaluation["eval_mean_token_accuracy"],
        "dual_lr": dual_lr,
    }


def first_settled(slack: np.ndarray, bound: np.ndarray, window: int) -> int | None:
    """The first step (1-based) from which the trailing `window`-step mean of every constraint's slack stays at or
    below its bound to the end; None if it never does."""
    steps = len(slack)
    means = np.stack([slack[max(0, t - window + 1) : t + 1].mean(axis=0) for t in range(steps)])  # [T, C]
    ok = (means <= bound).all(axis=1)  # [T]
    bad = np.flatnonzero(~ok)
    start = 0 if not len(bad) else int(bad[-1]) + 1
    return start + 1 if start < steps else None


def run_metrics(run: dict, resilience: float, window: int) -> dict:
    dual, slack = np.asarray(run["dual"]), np.asarray(run["slack"])  # [T, C]
    return {
        "steps_to_feasible_strict": first_settled(slack, np.zeros_like(slack), window),
        "steps_to_feasible_relaxed": first_settled(slack, resilience * dual, window),
        "overshoot": float((dual.max(axis=0) - dual[-1]).sum()),
        "total_variation": float(np.abs(np.diff(dual, axis=0)).sum()),
        "final_dual_max": float(dual[-1].max()),
        "f_L": run["f_L"],
        "accuracy": run["accuracy"],
        "initial_slack": float(np.abs(slack[0]).mean()),  # mean |g_c| at step 1, before any dual step
        "dual_lr": run.get("dual_lr"),
    }


def paired_interval(a: list[float], b: list[float], draws: int = 10_000) -> list[float]:
    """[mean(a - b), low, high]: a 95% percentile bootstrap over the seeds (the pairs)."""
    diff = np.asarray(a) - np.asarray(b)
    rng = np.random.default_rng(0)
    means = diff[rng.integers(0, len(diff), size=(draws, len(diff)))].mean(axis=1)
    return [float(diff.mean()), *map(float, np.quantile(means, [0.025, 0.975]))]


def method_row(method: str, runs: list[dict]) -> dict:
    """A method's runs (one per seed) summarised: how many settled (strict, relaxed), the mean settling step over
    all runs (None unless every run settled), and the mean overshoot, total variation, f_L and accuracy."""

    def mean(key):
        values = [r[key] for r in runs]
        return None if any(v is None for v in values) else float(np.mean(values))

    row = {"method": method}
    for kind in ("strict", "relaxed"):
        row[f"feasible_runs_{kind}"] = sum(r[f"steps_to_feasible_{kind}"] is not None for r in runs)
        row[f"steps_to_feasible_{kind}"] = mean(f"steps_to_feasible_{kind}")
    return row | {key: mean(key) for key in ("overshoot", "total_variation", "f_L", "accuracy")}


def summarize(per_method: dict[str, list[dict]], against: dict[str, list[dict]] | None = None) -> list[dict]:
    """One row per method; `against`: another results file's runs (same seeds), compared method by method."""
    erm = per_method["erm"]
    rows = []
    for method, runs in per_method.items():
        if method == "erm":
            continue
        rows.append(method_row(method, runs))
        for key in ("f_L", "accuracy"):
            rows[-1][f"{key}_minus_erm"] = paired_interval([r[key] for r in runs], [r[key] for r in erm])
        if method != "sgd" and "sgd" in per_method:  # against plain ascent, the question a user of sgd asks
            sgd = per_method["sgd"]
            rows[-1]["f_L_minus_sgd"] = paired_interval([r["f_L"] for r in runs], [r["f_L"] for r in sgd])
            rows[-1]["accuracy_minus_sgd"] = paired_interval(
                [r["accuracy"] for r in runs], [r["accuracy"] for r in sgd]
            )
        if against and len(against.get(method, [])) == len(runs):  # e.g. a dual-lr rule against a fixed dual_lr
            for key in ("accuracy", "f_L"):
                rows[-1][f"{key}_minus_against"] = paired_interval(
                    [r[key] for r in runs], [r[key] for r in against[method]]
                )
    return rows


def markdown(rows: list[dict], seeds: int) -> str:
    def steps(row, kind):
        n, value = row[f"feasible_runs_{kind}"], row[f"steps_to_feasible_{kind}"]
        return f"{n}/{seeds}" + (f", step {value:.0f}" if value is not None else "")

    def interval(values, digits):
        return f"{values[0]:+.{digits}f} [{values[1]:+.{digits}f}, {values[2]:+.{digits}f}]"

    lines = [
        "| dual optimizer | feasible (strict) | feasible (relaxed) | overshoot | total variation | f_L - ERM | "
        "accuracy - ERM | accuracy - SGD |",
        "|---|---|---|---|---|---|---|---|",
    ]
    extra = any("accuracy_minus_against" in r for r in rows)
    if extra:
        lines = [lines[0] + " accuracy - against |", lines[1] + "---|"]
    for r in rows:
        against_sgd = interval(r["accuracy_minus_sgd"], 4) if "accuracy_minus_sgd" in r else ""
        line = (
            f"| {r['method']} | {steps(r, 'strict')} | {steps(r, 'relaxed')} | {r['overshoot']:.3f} | "
            f"{r['total_variation']:.2f} | {interval(r['f_L_minus_erm'], 3)} | {interval(r['accuracy_minus_erm'], 4)} "
            f"| {against_sgd} |"
        )
        if extra:
            line += f" {interval(r['accuracy_minus_against'], 4) if 'accuracy_minus_against' in r else ''} |"
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--dual_lr", type=float, default=0.5)
    parser.add_argument(
        "--dual_lr_rule",
        type=float,
        help="Instead of --dual_lr: each seed's dual_lr = C / mean |g_c| at step 1 of its ERM run (the same first "
        "batch and weights as the constrained run's first step), so the first ascent step moves lambda by about C.",
    )
    parser.add_argument("--layers", type=int, default=4, help="The tiny model's layers (every one constrained).")
    parser.add_argument("--against", help="A results file of the same seeds to compare each method with (paired).")
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--resilience", type=float, default=0.0)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--output", default=os.path.join(RESULTS, "dual_optimizers_tiny_cpu.json"))
    parser.add_argument("--summarize", help="Recompute the rows and table of a results file from its stored runs.")
    args = parser.parse_args()
    if args.summarize:
        with open(args.summarize) as f:
            result = json.load(f)
        result["rows"] = summarize(result["runs"])
        with open(args.summarize, "w") as f:
            json.dump(result, f, indent=1)
        print(markdown(result["rows"], result["settings"]["seeds"]))
        return
    warnings.filterwarnings("ignore")
    import torch
    import transformers

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    started = time.time()
    per_method: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in ["erm", *args.methods]:
            per_method[method] = []
            for seed in range(args.seeds):
                lr = args.dual_lr
                if args.dual_lr_rule is not None and method != "erm":
                    lr = args.dual_lr_rule / per_method["erm"][seed]["initial_slack"]
                run = train(method, seed, args, os.path.join(tmp, f"{method}-{seed}"), lr)
                per_method[method].append(run_metrics(run, args.resilience, args.window))
                print(f"{method} seed {seed}: {per_method[method][-1]}", file=sys.stderr)
    against = None
    if args.against:
        with open(args.against) as f:
            against = json.load(f)["runs"]
    rows = summarize(per_method, against)
    result = {
        "settings": {
            **vars(args),
            "model": f"tiny llama ({args.layers} layers, every layer constrained)",
            "task": "successor",
        },
        "rows": rows,
        "runs": per_method,
        "wall_seconds": round(time.time() - started, 1),
        "machine": f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}, torch {torch.__version__}",
    }
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(result, f, indent=1)
    print(markdown(rows, args.seeds))
    print(f"{result['wall_seconds']} s; written to {args.output}")


if __name__ == "__main__":
    main()
