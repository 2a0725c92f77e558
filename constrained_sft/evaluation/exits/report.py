"""The report of `eval exits` (`evaluation.exits`), as blocks and plots: the speed-up of self-speculative decoding per
exit layer, and each layer's readout of the reference answers. Shown by `eval exits` and by the study."""

from __future__ import annotations

import dataclasses

from ...utils.figures import pyplot, save_figure
from ..report import Block, Heading, Image, Preformatted, Table, Text
from .results import ExitsResults


def plot_speedups(results: ExitsResults, path: str) -> str:
    """Speed-up over plain greedy decoding against the exit layer, one line per model with its 95% band."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, model in results.models.items():
        xs = sorted(model.exits)
        rows = [model.exits[x] for x in xs]
        (line,) = ax.plot(xs, [r.speedup for r in rows], marker="o", label=name)
        ax.fill_between(
            xs, [r.speedup_low for r in rows], [r.speedup_high for r in rows], color=line.get_color(), alpha=0.2
        )
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.set(
        xlabel="exit layer l (drafts with layers 1..l)",
        ylabel="speed-up over greedy decoding",
        title="Self-speculative decoding, batch 1 (band: 95% over prompts)",
    )
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def plot_layer_accuracy(results: ExitsResults, path: str) -> str:
    """Each layer's token accuracy on the reference answers, one panel per noise level, one line per model."""
    plt = pyplot()
    gammas = results.settings.gammas
    fig, axes = plt.subplots(1, len(gammas), figsize=(4.5 * len(gammas), 3.8), squeeze=False)
    for ax, gamma in zip(axes[0], gammas, strict=True):
        for name, layers in results.layer_views().items():
            accuracy = layers[float(gamma)].accuracy
            ax.plot(list(accuracy), list(accuracy.values()), marker=".", label=name)
        ax.set(xlabel="layer", ylabel="token accuracy of the layer's readout", title=f"gamma = {gamma:g}")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    return save_figure(fig, path)


def exits_blocks(results: ExitsResults, level: int = 1) -> list[Block]:
    """The speed-up table and plot, then (with reference answers) each layer's readout: plot and per-model tables."""
    rows = [
        [
            name,
            layer,
            r.speedup,
            f"[{r.speedup_low:.3f}, {r.speedup_high:.3f}]",
            r.tokens_per_second,
            model.plain_tokens_per_second,
            r.acceptance_rate,
            r.tokens_per_verify,
            "yes" if r.identical_to_greedy else "NO",
        ]
        for name, model in results.models.items()
        for layer, r in sorted(model.exits.items())
    ]
    headers = [
        "model",
        "exit layer",
        "speed-up",
        "95% CI",
        "tokens/s",
        "greedy tokens/s",
        "acceptance",
        "tokens per full forward",
        "tokens = greedy",
    ]
    blocks: list[Block] = [
        Heading("Self-speculative decoding", level),
        Text(results.settings.description),
        Table(headers, rows, number=".3f"),
        Image(results.files["plot"]),
    ]
    if "layer_plot" in results.files:
        gammas = [float(g) for g in results.settings.gammas]
        blocks += [
            Heading("Each layer's readout of the reference answers", level + 1),
            Image(results.files["layer_plot"]),
        ]
        for name, layers in results.layer_views().items():
            views = [layers[g] for g in gammas]
            table = [[x] + [v for view in views for v in (view.accuracy[x], view.loss[x])] for x in views[0].accuracy]
            headers = ["layer"] + [f"{what} (gamma {g:g})" for g in gammas for what in ("accuracy", "loss")]
            blocks += [Heading(name, level + 2), Table(headers, table)]
    return blocks


def exits_report(results: ExitsResults) -> list[Block]:
    """`eval exits`' page: the blocks, then the settings."""
    settings = dataclasses.asdict(results.settings)
    return [*exits_blocks(results), Heading("Settings"), Preformatted(f"{settings}\n{results.versions}")]
