"""
`eval robustness --task video`: every model on the test clips at every noise level, then the same outputs as the
other tasks (results.json, results.csv, PNG plots, report.html) with RMSE in place of accuracy, and `frames.png`: one
test clip clean, noisy and reconstructed by each model at two noise levels.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import os
import tempfile
from importlib.metadata import version
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoModel

from ..data.video import VideoDataArguments, VideoDenoisingDataset, read_clips
from ..models import ViTForDenoising
from ..utils import atomic_path, write_json
from .report import _img, _plt, _save, _table, _write_html, plot_descent, plot_layers, plot_metric
from .robustness import _layers, _train_gamma
from .video import (
    GREY,
    clip_errors,
    compare,
    evaluate_video_level,
    reconstruct_clip,
    summarize_video,
    video_eval_trainer,
)


def _axis(model) -> str:
    return "space" if isinstance(model, ViTForDenoising) else "time"


def run_video(args, data_args: VideoDataArguments, recipe: dict | None = None) -> dict:
    """`args`: the command's `RobustnessArguments`; `data_args`: the recipe's video fields (its test videos)."""
    args.validate()
    train_gamma = _train_gamma(args, recipe or {})
    top = 3 * train_gamma if train_gamma > 0 else 1.5
    gammas = sorted(set(args.gammas)) if args.gammas else [float(round(g, 6)) for g in np.linspace(0, top, 7)]
    strip = args.curve_gammas or [min(gammas, key=lambda g: abs(g - train_gamma)), gammas[-1]]
    if missing := [g for g in strip if g not in gammas]:
        raise ValueError(f"`--curve_gammas` {missing} are not among the evaluated levels {gammas}.")
    names = args.names or [os.path.basename(os.path.normpath(p)) or p for p in args.models]
    models = [AutoModel.from_pretrained(p) for p in args.models]
    sigma = args.sigma_x or models[0].config.data_std
    clips = read_clips(data_args, ("test",))[0]["test"]  # decoded once; sigma_x comes from the models
    tests = {axis: VideoDenoisingDataset(*clips, data_args.patch_size, axis) for axis in {_axis(m) for m in models}}
    test = next(iter(tests.values()))
    results: dict[str, Any] = {
        "settings": {
            "description": f"test videos {test.videos} ({len(test.clips)} clips of {test.clips.shape[1]} frames); "
            f"{args.seeds} noise seed(s) per level; pixel noise N({args.noise_mean}, (gamma sigma_x)^2); RMSE in grey "
            "levels of 0-255",
            "dataset": dataclasses.asdict(data_args),
            "gammas": gammas,
            "curve_gammas": strip,
            "seeds": args.seeds,
            "train_gamma": train_gamma,
            "noise_mean": args.noise_mean,
            "sigma_x": sigma,
            "task": "video",
        },
        "versions": {p: version(p) for p in ("constrained-sft", "torch", "transformers")},
        "models": {},
    }
    errors, frames = {}, {}
    clip = len(test.clips) // 2
    with tempfile.TemporaryDirectory() as scratch:
        for name, path, model in zip(names, args.models, models, strict=True):
            dataset = tests[_axis(model)]
            trainer = video_eval_trainer(model, dataset, _layers(args, path), args.batch_size, scratch, sigma)
            levels = []
            for gamma in tqdm(gammas, desc=f"evaluating {name}"):
                levels.append([evaluate_video_level(trainer, gamma, s, args.noise_mean) for s in range(args.seeds)])
            errors[name] = clip_errors(levels)
            frames[name] = {g: reconstruct_clip(model, dataset, clip, g, 0, sigma, args.noise_mean) for g in strip}
            results["models"][name] = {
                "path": path,
                "architecture": type(model).__name__,
                "layers": list(trainer.primal_dual.spec.layers),
                "summary": summarize_video(levels, train_gamma),
                "clip_mse": {str(g): e.tolist() for g, e in errors[name].items()},
            }
    if len(names) == 2:
        results["differences"] = {
            "label": f"{names[0]} - {names[1]} (RMSE, lower is better; 95% paired bootstrap over test clips)",
            **compare([errors[names[0]]], [errors[names[1]]], train_gamma),
        }
    results["files"] = write_video_report(results, frames, test.clips[clip], args.output_dir)
    return results


def plot_frames(frames: dict, clean: torch.Tensor, path: str, shown: int = 4) -> str:
    """Rows: clean; then per gamma the noisy input and each model's reconstruction. Columns: frames of one clip."""
    plt = _plt()
    T = clean.shape[0]
    picks = sorted({round(i * (T - 1) / max(shown - 1, 1)) for i in range(shown)})
    names = list(frames)
    gammas = list(frames[names[0]])
    rows = [("clean", clean)]
    for g in gammas:
        rows.append((f"noisy, gamma {g:g}", frames[names[0]][g][0]))
        rows += [(f"{n}, gamma {g:g}", frames[n][g][1]) for n in names]
    fig, axes = plt.subplots(len(rows), len(picks), figsize=(1.9 * len(picks), 1.9 * len(rows)), squeeze=False)
    for (label, video), line in zip(rows, axes, strict=True):
        for t, ax in zip(picks, line, strict=True):
            ax.imshow(video[t].clamp(0, 1).numpy(), cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([]), ax.set_yticks([])
            if label != "clean":
                rmse = float(((video[t] - clean[t]) ** 2).mean().sqrt()) * GREY
                ax.set_xlabel(f"RMSE {rmse:.1f}", fontsize=7)
        line[0].set_ylabel(label, fontsize=7)
    return _save(fig, path)


def write_video_report(results: dict[str, Any], frames: dict, clean: torch.Tensor, output_dir: str) -> dict:
    os.makedirs(output_dir, exist_ok=True)
    paths = {"json": os.path.join(output_dir, "results.json"), "csv": os.path.join(output_dir, "results.csv")}
    plots = {
        "rmse": plot_metric(
            results,
            os.path.join(output_dir, "rmse_vs_gamma.png"),
            "rmse",
            "RMSE (grey levels, 0-255)",
            "RMSE vs pixel noise",
        ),
        "layers": plot_layers(
            results, os.path.join(output_dir, "layer_losses.png"), "layer_rmse", "RMSE of the layer's readout (0-255)"
        ),
        "descent": plot_descent(results, os.path.join(output_dir, "descent_vs_gamma.png")),
        "frames": plot_frames(frames, clean, os.path.join(output_dir, "frames.png")),
    }
    paths.update(plots)
    write_json(paths["json"], {**results, "files": paths})
    layers = sorted(
        {k for m in results["models"].values() for r in m["summary"]["levels"] for k in r["layer_rmse"]}, key=int
    )
    with atomic_path(paths["csv"]) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["model", "gamma", "rmse_mean", "rmse_std", "descent_share", *[f"layer_rmse/{k}" for k in layers]]
        )
        for name, m in results["models"].items():
            for r in m["summary"]["levels"]:
                writer.writerow([name, r["gamma"], r["rmse_mean"], r["rmse_std"], r["descent_share"],
                                 *[r["layer_rmse"].get(k, "") for k in layers]])  # fmt: skip
    sections = [
        f"<h1>Robustness report (video denoising)</h1><p>{html.escape(results['settings']['description'])}</p>",
        _table(
            ["model", "ID RMSE", "OOD RMSE", "descent share", "train gamma"],
            [
                [
                    n,
                    m["summary"]["id_rmse"],
                    m["summary"]["ood_rmse"],
                    m["summary"]["descent_share"],
                    m["summary"]["train_gamma"],
                ]
                for n, m in results["models"].items()
            ],  # fmt: skip
        ),
    ]
    if d := results.get("differences"):
        rows = [[f"gamma {r['gamma']:g}", r["estimate"], r["low"], r["high"], r["verdict"]] for r in d["per_gamma"]]
        rows += [
            [k.upper(), d[k]["estimate"], d[k]["low"], d[k]["high"], d[k]["verdict"]] for k in ("id", "ood") if k in d
        ]
        sections.append(
            f"<h2>{html.escape(d['label'])}</h2>" + _table(["", "difference", "low", "high", "verdict"], rows)
        )
    for name, m in results["models"].items():
        rows = [[r["gamma"], r["rmse_mean"], r["rmse_std"], r["descent_share"],
                 " / ".join(f"{r['layer_rmse'][k]:.2f}" for k in sorted(r["layer_rmse"], key=int))]
                for r in m["summary"]["levels"]]  # fmt: skip
        sections.append(
            f"<h2>{html.escape(name)}</h2><p>{html.escape(m['path'])} ({html.escape(m['architecture'])})</p>"
            + _table(["gamma", "RMSE", "std over noise seeds", "descent share", "layer RMSEs"], rows)
        )
    sections.append("<h2>Plots</h2>" + "".join(_img(p) for p in plots.values()))
    sections.append(f"<h2>Settings</h2><pre>{html.escape(str(results['settings']))}</pre>")
    paths["html"] = _write_html(os.path.join(output_dir, "report.html"), sections)
    return paths
