"""
A trainer's embedding noise, owned by the trainer as one object (`trainer.noise`): the reference scale sigma_x,
the private RNG streams of the run (noise, noise levels, token samples), the training levels, and the evaluation
loop with the seeded noisy evaluations of `eval_noise_gammas`.
"""

from __future__ import annotations

import contextlib
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..noise import EmbeddingNoiseError, NoiseLevels, embedding_sigma, noise_stream, noisy
from ..noise.modality import check_modality, image_feature_sigma, language_model
from ..utils.types import Batch, Logs, NoiseModality


def reference_sigma(args: Any, model: Any) -> float | None:
    """sigma_x of every noisy forward of a run: the config's `noise_sigma`, else the starting model's, measured
    once; None for a model without input embeddings trained without noise (with noise: refused, saying why)."""
    given = getattr(args, "noise_sigma", None)
    if given is not None:
        return given
    try:
        return embedding_sigma(model)
    except EmbeddingNoiseError as error:
        if getattr(args, "uses_noise", False):
            raise EmbeddingNoiseError(
                f"`noise_gamma` / `eval_noise_gammas` perturb the input embeddings, but {error} Train this model "
                "with `noise_gamma: 0` and no `eval_noise_gammas`, or use a model whose token embeddings come "
                "from `get_input_embeddings()`."
            ) from None
        return None


class TrainingNoise:
    """
    The noise of one run. Every draw comes from a private stream keyed by (purpose, seed, optimizer step, draw,
    rank), so a resumed run draws exactly what the uninterrupted run drew, no two ranks share a stream, and the
    global RNG is untouched. `step()` is read at each draw (the trainer's `state.global_step`); `next_step()` is
    called once per optimizer step.
    """

    def __init__(self, args: Any, model: Any, step: Callable[[], int]) -> None:
        self.args = args
        self.step = step
        self.sigma = reference_sigma(args, model)
        gamma = getattr(args, "noise_gamma", 0.0)
        self.levels = NoiseLevels(
            gamma=None if isinstance(gamma, list) else gamma,
            gamma_range=gamma if isinstance(gamma, list) else None,
            clean_prob=getattr(args, "noise_clean_prob", 0.0),
        )
        # a VLM's: which inputs (`noise.modality`), and the image features' scale (given, measured, or None)
        self.modality: NoiseModality = getattr(args, "noise_modality", "both")
        self.image_sigma: float | None = getattr(args, "noise_image_sigma", None)
        if getattr(args, "uses_noise", False):
            check_modality(self.modality, model)
        self.draws: dict[str, int] = defaultdict(int)  # purpose -> draws so far in this optimizer step
        self.evaluating = False  # inside the noisy evaluations: a nested `evaluate` runs clean only

    def measure_images(self, model: Any, first_batch: Callable[[], Batch | None], always: bool = False) -> None:
        """
        sigma_img of a VLM run with image noise, before training: the std of the image features the starting model
        gives `first_batch()` (the training data's first rows: the same at a resume), unless `noise_image_sigma`
        is given. With `noise_modality: both`, data without images leave it unmeasured (nothing to perturb).
        `always`: measured for a trainer that only evaluates (no noise in its config), as `eval robustness` asks.
        """
        perturbs = always or getattr(self.args, "uses_noise", False)
        wanted = perturbs and self.modality != "text" and self.image_sigma is None
        if not wanted or language_model(model) is None or (batch := first_batch()) is None:
            return
        try:
            self.image_sigma = image_feature_sigma(model, batch)
        except EmbeddingNoiseError:
            if self.modality == "image":
                raise
            self.image_sigma = None

    @contextlib.contextmanager
    def noisy(
        self, model: Any, gamma: float | torch.Tensor, generator: torch.Generator, mean: float
    ) -> Iterator[None]:
        """`noise.noisy` at this run's scales and modality; an image scale measured inside is kept for the run."""
        image_sigma = self.image_sigma
        with noisy(
            model, gamma, generator, mean, sigma=self.sigma, modality=self.modality, image_sigma=image_sigma
        ) as noise:
            yield
        self.image_sigma = getattr(noise, "image_sigma", None) or image_sigma

    def next_step(self) -> None:
        """A new optimizer step: the draw counters start again (the step is part of every key)."""
        self.draws.clear()

    def generator(self, purpose: str, device: torch.device) -> torch.Generator:
        """The next private stream for `purpose` in this optimizer step, on this rank."""
        key = f"{purpose}/{self.args.seed}/{self.step()}/{self.draws[purpose]}/{self.args.process_index}"
        self.draws[purpose] += 1
        return torch.Generator(device=device).manual_seed(zlib.crc32(key.encode()))

    def row_stream(self, purpose: str, rows: int) -> tuple[int, int]:
        """
        (seed, first global row) of a micro-batch of `rows` rows, for streams keyed by row (see `row_keys`): the
        seed is a function of (purpose, seed, step), the row of (micro-batch, rank), so a sequence draws the same
        whatever the split of the global batch into micro-batches and ranks.
        """
        micro = self.draws[purpose]
        self.draws[purpose] += 1
        seed = zlib.crc32(f"{purpose}/{self.args.seed}/{self.step()}".encode())
        return seed, (micro * self.args.world_size + self.args.process_index) * rows

    def for_forward(self, model: Any, inputs: Batch, training: bool) -> contextlib.AbstractContextManager[object]:
        """
        Embedding noise for one forward: per-example levels from a collator's `noise_gamma` (popped: it never
        reaches the model), else in training (`training`: the trainer's model is in train mode) the config's
        `noise_gamma` drawn by [`training_levels`].
        """
        gamma = inputs.pop("noise_gamma", None)
        if gamma is None:
            gamma = self.training_levels(inputs, training)
        if gamma is None:
            return contextlib.nullcontext()
        return self.noisy(model, gamma, self.generator("noise", gamma.device), self.args.noise_mean)

    def training_levels(self, inputs: Batch, training: bool) -> torch.Tensor | None:
        """
        `[n]` levels for a training micro-batch: one per row, or one per document of a padding-free row (documents
        start where `position_ids` restart at 0); None in evaluation or without training noise.
        """
        if not (training and getattr(self.args, "trains_with_noise", False)):
            return None
        ids, positions = inputs.get("input_ids"), inputs.get("position_ids")
        if ids is None:  # models fed something else (a denoiser's `input_values`): one level per row
            ids = next(v for k, v in inputs.items() if torch.is_tensor(v) and k != "labels")
        n = int(positions.eq(0).sum()) if positions is not None and ids.shape[0] == 1 else ids.shape[0]
        levels = self.levels.sample(max(n, 1), self.generator("noise-levels", torch.device("cpu")))
        return levels.to(ids.device)

    def evaluation_levels(self, prefix: str) -> list[tuple[str, float, int]]:
        """
        (metric prefix, gamma, seed) for each of `eval_noise_gammas`, evaluated after a clean evaluation under
        `prefix`: the prefix is `<prefix>_gamma_<level>`, the seed one per level and rank, so every evaluation at a
        level draws the same noise. Empty while already inside these evaluations (`evaluating`).
        """
        if self.evaluating:
            return []
        levels = getattr(self.args, "eval_noise_gammas", None) or []
        rank = self.args.process_index
        return [
            (f"{prefix}_gamma_{g:g}", g, self.args.seed + 7919 * (i + 1) + 104729 * rank) for i, g in enumerate(levels)
        ]

    def evaluate(self, run: Callable[[str], Logs], model: Any, prefix: str, several: bool = False) -> Logs:
        """
        A trainer's evaluation: `run(prefix)` (one `Trainer.evaluate` under a metric prefix) clean, then with
        `eval_noise_gammas` once per level under `<prefix>_gamma_<level>`, seeded (`evaluation_levels`). `several`:
        `Trainer.evaluate` was given a dict of datasets and comes back once per dataset: the levels run there.
        """
        metrics = run(prefix)
        levels = self.evaluation_levels(prefix)
        if not levels or several:
            return metrics
        self.evaluating = True
        try:
            for level_prefix, gamma, seed in levels:
                with self.at_level(model, gamma, seed):
                    metrics.update(run(level_prefix))
        finally:
            self.evaluating = False
        return metrics

    def at_level(
        self, model: Any, gamma: float, seed: int, mean: float | None = None
    ) -> contextlib.AbstractContextManager[object]:
        """Noise at one evaluation level from the stream of `seed` (`evaluation_levels`; `eval robustness` and the
        sweep's validation scores), at the run's sigma_x; `mean`: the run's `noise_mean` unless given."""
        mean = self.args.noise_mean if mean is None else mean
        return self.noisy(model, gamma, noise_stream(model, seed), mean)
