"""The robustness report's plots, from typed results: the headline per arm with its band, each comparison's
difference with its band, per-layer curves, layer-step ratios and per-sample descent."""

from __future__ import annotations

from ...utils.figures import pyplot, save_figure
from .results import RobustnessResults


def plot_metric(results: RobustnessResults, path: str) -> str:
    """The headline against gamma, one line per arm (pooled over its seeds) with its 95% bootstrap band."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    gammas = results.gammas
    for arm, band in results.bands.items():
        (line,) = ax.plot(gammas, band.value, marker="o", label=f"{arm} ({len(results.arms[arm])} model(s))")
        ax.fill_between(gammas, band.low, band.high, color=line.get_color(), alpha=0.2)
    ax.axvline(results.settings.train_gamma, color="gray", lw=0.8, ls=":")
    ax.set(xlabel="test noise level gamma", ylabel=results.headline.label, title="band: 95% bootstrap interval")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def plot_differences(results: RobustnessResults, path: str) -> str:
    """Each comparison's headline difference A - B against gamma with its 95% paired interval; 0 dashed."""
    plt = pyplot()
    key, gammas = results.headline.key, results.gammas
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, comparison in results.comparisons.items():
        rows = [comparison.rows[f"{key}@{g:g}"].difference for g in gammas]
        (line,) = ax.plot(gammas, [r.estimate for r in rows], marker="o", label=name)
        ax.fill_between(gammas, [r.low for r in rows], [r.high for r in rows], color=line.get_color(), alpha=0.2)
    ax.axhline(0.0, color="black", lw=0.8, ls="--")
    ax.axvline(results.settings.train_gamma, color="gray", lw=0.8, ls=":")
    better = "above" if results.headline.higher_is_better else "below"
    ax.set(
        xlabel="test noise level gamma",
        ylabel=f"difference in {key}",
        title=f"A - B, 95% interval ({better} 0: A better)",
    )
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def plot_layers(results: RobustnessResults, path: str) -> str:
    """The per-layer curve (`layer_curve`) against the layer at each of the curve levels, one line per model."""
    plt = pyplot()
    key, ylabel = results.layer_curve
    gammas = results.settings.curve_gammas
    fig, axes = plt.subplots(1, len(gammas), figsize=(4.5 * len(gammas), 3.8), squeeze=False)
    for ax, gamma in zip(axes[0], gammas, strict=True):
        for name, model in results.models.items():
            curve = model.summary.level(gamma).curves[key]
            layers = sorted(curve, key=int)
            ax.plot([int(x) for x in layers], [curve[x] for x in layers], marker=".", label=name)
        ax.set(xlabel="layer", ylabel=ylabel, title=f"gamma = {gamma:g}")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    return save_figure(fig, path)


def plot_ratios(results: RobustnessResults, path: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    gamma = results.settings.curve_gammas[0]
    for name, model in results.models.items():
        row = model.summary.level(gamma)
        total = max(sum(row.ratio_counts), 1)
        ax.stairs(
            [c / total for c in row.ratio_counts],
            row.ratio_edges,
            label=f"{name} (median {row.ratio_median:.2f})",
            fill=False,
        )
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set(
        xlabel="per-sample layer ratio f_l / f_(l-1) (clipped at 2)",
        ylabel="share of steps",
        title=f"Layer steps at gamma = {gamma:g} (left of 1: descent)",
    )
    ax.legend()
    return save_figure(fig, path)


def plot_descent(results: RobustnessResults, path: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, model in results.models.items():
        levels = model.summary.levels
        ax.plot([r.gamma for r in levels], [r.descent_share for r in levels], marker="o", label=name)
    ax.set(xlabel="test noise level gamma", ylabel="share of descending layer steps", title="Per-sample descent")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)
