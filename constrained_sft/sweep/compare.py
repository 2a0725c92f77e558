"""
The comparison protocol (the paper's Appendix B.3, with intervals): each arm's best configuration is retrained with
seeds 0..S-1, every retrained model is evaluated on the test split by `eval robustness` (the same noisy inputs for
every model), and each constrained arm is compared with its ERM twin by paired bootstrap over seeds and test
examples: accuracy at every gamma, ID and OOD accuracy, and the AUC over the grid.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from ..evaluation.bootstrap import paired_bootstrap
from ..evaluation.robustness import RobustnessArguments
from ..evaluation.robustness import run as robustness

DONE = "training_args.json"  # Trainer.save_model writes it last: a seed folder holding it is complete


def run_name(arm: str, seed: int) -> str:
    """A retrained model's name in the test results: '<arm>/seed<s>'."""
    return f"{arm}/seed{seed}"


def seed_dir(sweep_dir: str, arm: str, seed: int) -> str:
    return os.path.join(sweep_dir, "final", arm, f"seed{seed}")


def hits_matrix(model_results: list[dict], gammas: list[float]) -> np.ndarray:
    """`[K, S, N]` 0/1 correctness: gamma k, training seed s, test example i (noise seed 0 of each level)."""
    return np.array(
        [
            [np.frombuffer(m["hits"][str(g)][0].encode(), dtype=np.uint8) - ord("0") for m in model_results]
            for g in gammas
        ],
        dtype=np.float64,
    )


def statistics(hits: np.ndarray, gammas: list[float], train_gamma: float) -> dict[str, np.ndarray]:
    """Per (seed, example) scores `[S, N]` whose mean is each reported statistic."""
    g = np.asarray(gammas, dtype=np.float64)
    out = {f"accuracy@{x:g}": hits[k] for k, x in enumerate(gammas)}
    out["id_accuracy"] = hits[g <= train_gamma].mean(0)
    if (g > train_gamma).any():
        out["ood_accuracy"] = hits[g > train_gamma].mean(0)
    out["auc"] = np.trapezoid(hits, g, axis=0)  # as `metrics.auc`, per (seed, example): its mean is the AUC
    # the paper's reading of robustness: the accuracy change from clean inputs to the strongest noise (negative;
    # higher is better, like every other statistic, so one verdict rule serves all)
    out[f"change 0->{g.max():g}"] = hits[np.argmax(g)] - hits[np.argmin(g)]
    return out


def compare_arms(
    results: dict[str, Any], pairs: list[tuple[str, str]], seeds: int, n_boot: int = 2000
) -> dict[str, Any]:
    """For each (constrained arm, ERM arm): every statistic's mean per arm and the difference with its 95% interval."""
    gammas = results["settings"]["gammas"]
    train_gamma = results["settings"]["train_gamma"]
    models = results["models"]

    def arm_stats(arm: str) -> dict[str, np.ndarray]:
        return statistics(hits_matrix([models[run_name(arm, s)] for s in range(seeds)], gammas), gammas, train_gamma)

    def descent(arm: str) -> float:
        return float(np.mean([models[run_name(arm, s)]["summary"]["descent_share"] for s in range(seeds)]))

    out = {}
    for a, b in pairs:
        sa, sb = arm_stats(a), arm_stats(b)
        out[f"{a} - {b}"] = {
            key: {
                a: float(sa[key].mean()),
                b: float(sb[key].mean()),
                "seed_std": [float(sa[key].mean(1).std()), float(sb[key].mean(1).std())],
                "difference": paired_bootstrap(sa[key] - sb[key], n_boot=n_boot).to_dict(),
            }
            for key in sa
        } | {"descent_share": {a: descent(a), b: descent(b)}}
    return out


def evaluate_finals(arms: list[str], settings, train_gamma: float, data_args) -> dict[str, Any]:
    """`eval robustness` on the test split over every retrained model; results keyed '<arm>/seed<s>'. A finished
    evaluation of the same models and levels (`test/results.json`) is reused, so re-running the comparison (new
    statistics, a killed run) does not evaluate again."""
    runs = [(arm, s) for arm in arms for s in range(settings.final_seeds)]
    saved = os.path.join(settings.sweep_dir, "test", "results.json")
    if os.path.isfile(saved):
        with open(saved) as f:
            results = json.load(f)
        same_levels = results["settings"]["gammas"] == settings.gammas
        if same_levels and list(results["models"]) == [run_name(a, s) for a, s in runs]:
            results.setdefault("files", {"results": saved})
            return results
    args = RobustnessArguments(
        task="classification",
        models=[seed_dir(settings.sweep_dir, arm, s) for arm, s in runs],
        names=[run_name(arm, s) for arm, s in runs],
        output_dir=os.path.join(settings.sweep_dir, "test"),
        gammas=settings.gammas,
        train_gamma=train_gamma,
        seeds=1,
        batch_size=settings.eval_batch_size,
        curve_gammas=[settings.gammas[0], settings.gammas[-1]],
    )
    return robustness(args, data_args)


def table(comparison: dict[str, Any]) -> str:
    """Markdown: one row per statistic and pair, arm means and the difference with its interval and verdict."""
    lines = [
        "| comparison | statistic | constrained | ERM | difference [95% CI] | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for pair, stats in comparison.items():
        a, b = pair.split(" - ")
        for key, row in stats.items():
            if key == "descent_share":
                lines.append(f"| {pair} | descent share | {row[a]:.3f} | {row[b]:.3f} | {row[a] - row[b]:+.3f} | |")
                continue
            d = row["difference"]
            lines.append(
                f"| {pair} | {key} | {row[a]:.4f} | {row[b]:.4f} | {d['estimate']:+.4f} [{d['low']:+.4f}, "
                f"{d['high']:+.4f}] | {d['verdict']} |"
            )
    return "\n".join(lines)


def plot_arms(results: dict[str, Any], arms: list[str], seeds: int, path: str) -> str:
    """Accuracy vs gamma per arm: mean over training seeds, band = min..max over seeds."""
    from ..evaluation.report import _plt, _save

    plt = _plt()
    gammas = results["settings"]["gammas"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm in arms:
        acc = np.array(
            [
                [r["accuracy_mean"] for r in results["models"][run_name(arm, s)]["summary"]["levels"]]
                for s in range(seeds)
            ]
        )
        ax.plot(gammas, acc.mean(0), marker="o", label=arm)
        ax.fill_between(gammas, acc.min(0), acc.max(0), alpha=0.2)
    ax.axvline(results["settings"]["train_gamma"], color="gray", lw=0.8, ls=":")
    ax.set(xlabel="test noise level gamma", ylabel="test accuracy", title=f"Mean of {seeds} seeds (band: min-max)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)
