"""
Robustness of video denoisers (`eval robustness --task video`): RMSE of the reconstruction against the test noise
level gamma, per-layer losses, per-sample descent, constrained - ERM differences with paired bootstrap intervals over
test clips (and training seeds, when each arm has several), and a strip of frames a person can look at.

RMSE = sqrt(mean over every test pixel of (x - x^)^2), in grey levels of 0-255 (the scale of the paper's tables);
per noise seed, then averaged over seeds. Every model sees the same noisy pixels: the same clips in the same order
and one noise stream per seed, at one sigma_x (the first model's `data_std` unless `--sigma_x` is given).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np
import torch
from transformers import default_data_collator

from ..config import ConstrainedConfig
from ..noise import embedding_noise
from ..trainers import ConstrainedTrainer
from .bootstrap import Interval
from .metrics import step_ratios
from .robustness import _measure_only

GREY = 255.0


def video_eval_trainer(model, dataset, layers, batch_size: int, output_dir: str, sigma: float | None):
    """A ConstrainedTrainer that only measures (no constraints), on the test clips."""
    args = ConstrainedConfig(**_measure_only(output_dir, batch_size, False, layers, sigma))
    return ConstrainedTrainer(
        model=model, args=args, eval_dataset=dataset, data_collator=default_data_collator, loss="squared_error"
    )


@dataclass
class VideoLevel:
    """One model at one noise level with one noise seed."""

    gamma: float
    seed: int
    clip_mse: np.ndarray  # [C] mean squared error of each test clip, grey levels in [0, 1]
    layer_loss: dict[int, float]  # f_l: mean squared error of layer l's readout
    descent_share: float
    ratios: np.ndarray  # f_l / f_{l-1} per (example, layer step)

    @property
    def rmse(self) -> float:
        return math.sqrt(float(self.clip_mse.mean())) * GREY


@torch.no_grad()
def evaluate_video_level(trainer, gamma: float, seed: int, mean: float = 0.0) -> VideoLevel:
    """Every test example at noise level `gamma` with noise stream `seed`, through the training code path."""
    model, spec = trainer.model, trainer.primal_dual.spec
    model.eval()
    dataset = trainer.eval_dataset
    per_example, layer_sums, ratios = [], torch.zeros(len(spec.layers), dtype=torch.float64), []
    generator = torch.Generator(device=trainer.args.device).manual_seed(seed)
    with embedding_noise(model, gamma=gamma, mean=mean, generator=generator, sigma=trainer.noise_sigma):
        for batch in trainer.get_eval_dataloader():
            batch = trainer._prepare_inputs(batch)
            out = model(**batch, output_hidden_states=True)
            per_example.append(trainer.loss_fn(out.logits, batch["labels"]).double().cpu())
            layers = trainer._layer_losses(out, batch["labels"], None)
            layer_sums += layers.sums.detach().double().cpu()
            ratios.append(step_ratios(layers).cpu())
    errors = torch.cat(per_example)  # [E]
    clips = dataset.clip_of
    clip_mse = torch.zeros(int(clips.max()) + 1, dtype=torch.float64).index_add_(0, clips, errors)
    clip_mse /= torch.bincount(clips).double()
    ratio = torch.cat(ratios)
    return VideoLevel(
        gamma=gamma,
        seed=seed,
        clip_mse=clip_mse.numpy(),
        layer_loss={layer: (s / len(errors)).item() for layer, s in zip(spec.layers, layer_sums, strict=True)},
        descent_share=ratio.lt(1).double().mean().item() if ratio.numel() else math.nan,
        ratios=ratio.numpy(),
    )


def summarize_video(levels: list[list[VideoLevel]], train_gamma: float) -> dict:
    """Per gamma: RMSE mean / std over noise seeds, layer losses (and their RMSE), descent share; then ID (gamma <=
    train) and OOD (gamma > train) mean RMSE."""
    rows = []
    for per_seed in levels:
        rmse = [r.rmse for r in per_seed]
        layer_loss = {str(k): statistics.fmean(r.layer_loss[k] for r in per_seed) for k in per_seed[0].layer_loss}
        ratios = np.concatenate([r.ratios for r in per_seed])
        rows.append(
            {
                "gamma": per_seed[0].gamma,
                "rmse_mean": statistics.fmean(rmse),
                "rmse_std": statistics.pstdev(rmse),
                "layer_loss": layer_loss,
                "layer_rmse": {k: math.sqrt(v) * GREY for k, v in layer_loss.items()},
                "descent_share": statistics.fmean(r.descent_share for r in per_seed),
                "ratio_median": float(np.median(ratios)) if ratios.size else math.nan,
                "seeds": [r.seed for r in per_seed],
            }
        )
    ind = [r["rmse_mean"] for r in rows if r["gamma"] <= train_gamma]
    ood = [r["rmse_mean"] for r in rows if r["gamma"] > train_gamma]
    return {
        "train_gamma": train_gamma,
        "levels": rows,
        "id_rmse": statistics.fmean(ind) if ind else math.nan,
        "ood_rmse": statistics.fmean(ood) if ood else math.nan,
        "descent_share": statistics.fmean(r["descent_share"] for r in rows),
    }


def rmse_difference(
    mse_a: np.ndarray, mse_b: np.ndarray, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0
) -> Interval:
    """
    RMSE(A) - RMSE(B) in grey levels with a paired percentile bootstrap: `mse_*` are `[S, C]` per-clip mean squared
    errors (S training seeds, paired s with s, or S = 1; C test clips, averaged over noise seeds); each resample draws
    seeds and clips with replacement, the same draw for both models, and recomputes both RMSEs (a square root of a
    mean, so not a mean of per-clip differences). Cost: n_boot * S * C.
    """
    a, b = np.asarray(mse_a, np.float64), np.asarray(mse_b, np.float64)
    if a.shape != b.shape or a.ndim != 2 or a.size == 0:
        raise ValueError(f"Per-clip errors must be two [seeds, clips] arrays of one shape, got {a.shape}, {b.shape}.")
    S, C = a.shape
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, S, size=(n_boot, S))[:, :, None]  # [n, S, 1]
    cols = rng.integers(0, C, size=(n_boot, C))[:, None, :]  # [n, 1, C]
    boot = (np.sqrt(a[rows, cols].mean((1, 2))) - np.sqrt(b[rows, cols].mean((1, 2)))) * GREY
    tail = (1 - confidence) / 2
    low, high = np.quantile(boot, [tail, 1 - tail])
    estimate = (math.sqrt(a.mean()) - math.sqrt(b.mean())) * GREY
    return Interval(estimate, float(low), float(high), confidence)


def clip_errors(levels: list[list[VideoLevel]]) -> dict[float, np.ndarray]:
    """{gamma: `[C]` per-clip MSE averaged over noise seeds}."""
    return {lv[0].gamma: np.mean([r.clip_mse for r in lv], axis=0) for lv in levels}


def compare(errors_a: list[dict[float, np.ndarray]], errors_b: list[dict[float, np.ndarray]], train_gamma: float):
    """A - B per gamma and over the ID / OOD levels, from each arm's per-seed `clip_errors` (paired by position).
    Lower RMSE is better: an interval wholly below 0 means A denoises better."""
    gammas = sorted(errors_a[0])
    out = {"per_gamma": []}
    for g in gammas:
        interval = rmse_difference(np.stack([e[g] for e in errors_a]), np.stack([e[g] for e in errors_b]))
        out["per_gamma"].append({"gamma": g, **_lower_is_better(interval)})
    for key, chosen in (
        ("id", [g for g in gammas if g <= train_gamma]),
        ("ood", [g for g in gammas if g > train_gamma]),
    ):
        if chosen:  # mean RMSE over the levels: resample clips once, jointly for every level
            a = np.concatenate([np.stack([e[g] for e in errors_a]) for g in chosen], axis=1)
            b = np.concatenate([np.stack([e[g] for e in errors_b]) for g in chosen], axis=1)
            out[key] = _lower_is_better(rmse_difference(a, b))
    return out


def _lower_is_better(interval: Interval) -> dict:
    verdict = "better" if interval.high < 0 else "worse" if interval.low > 0 else "same"
    return {**interval.to_dict(), "verdict": verdict}


@torch.no_grad()
def reconstruct_clip(model, dataset, clip: int, gamma: float, seed: int, sigma: float | None, mean: float = 0.0):
    """(noisy, reconstruction) frames `[T, F, F]` of test clip `clip` at `gamma`, noise stream `seed`."""
    model.eval()
    rows = (dataset.clip_of == clip).nonzero().flatten()
    clean = dataset.examples[rows].to(next(model.parameters()).device)
    noisy = {}
    generator = torch.Generator(device=clean.device).manual_seed(seed)
    with embedding_noise(model, gamma=gamma, mean=mean, generator=generator, sigma=sigma) as noise:
        # after the noise hook: sees the perturbed pixels
        handle = noise.module.register_forward_hook(lambda _m, _a, out: noisy.setdefault("x", out.detach()))
        try:
            recon = model(input_values=clean).logits
        finally:
            handle.remove()
    return dataset.to_clips(noisy["x"].cpu())[0], dataset.to_clips(recon.cpu())[0].clamp(0, 1)
