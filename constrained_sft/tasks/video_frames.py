"""The video report's frame strip: one test clip clean, noisy, and as each model reconstructs it at a few noise levels."""

from __future__ import annotations

import torch

from ..noise import noise_stream, noisy
from ..utils.figures import pyplot, save_figure

GREY = 255.0  # RMSE on the 0-255 scale of the paper's tables


@torch.no_grad()
def reconstruct_clip(model, dataset, clip: int, gamma: float, seed: int, sigma: float | None, mean: float = 0.0):
    """(noisy, reconstruction) frames `[T, F, F]` of test clip `clip` at `gamma`, noise stream `seed`."""
    model.eval()
    rows = (dataset.clip_of == clip).nonzero().flatten()
    clean = dataset.examples[rows].to(next(model.parameters()).device)
    seen: dict[str, torch.Tensor] = {}
    with noisy(model, gamma, noise_stream(model, seed), mean, sigma) as noise:
        # after the noise hook: sees the perturbed pixels
        handle = noise.module.register_forward_hook(lambda _m, _a, out: seen.setdefault("x", out.detach()))
        try:
            recon = model(input_values=clean).logits
        finally:
            handle.remove()
    return dataset.to_clips(seen["x"].cpu())[0], dataset.to_clips(recon.cpu())[0].clamp(0, 1)


def plot_frames(frames: dict, clean: torch.Tensor, path: str, shown: int = 4) -> str:
    """Rows: clean; then per gamma the noisy input and each model's reconstruction. Columns: frames of one clip."""
    plt = pyplot()
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
    return save_figure(fig, path)
