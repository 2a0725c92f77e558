"""
One model's robustness measurement, apart from the command that gathers them: `eval robustness` measures its models
one after the other in one process, and a study measures each run right after it trains (in whichever process
trained it), keeps the `ModelResult` and later compares the runs from these alone, weights deleted or not.

`Measurement` holds what every model compared shares (the held-out data, the level grid, the noise seeds, the scale
sigma_x, precision and batching); `measure_model` runs one model at every level and noise seed; `finish` turns the
gathered results into bands, comparisons and the report.
"""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ...data import ModelSpec
from ...noise import NoiseGrid
from ...noise.modality import check_modality
from ...tasks import Measure, Task
from ...trainers.setup import first_batch
from ...utils.types import NoiseModality
from ..loading import trained_layers, training_report, versions
from .compare import bands, compare
from .levels import evaluate_level
from .metrics import summarize
from .report import write_report
from .results import ModelResult, RobustnessResults, RobustnessSettings


@dataclass
class Measurement:
    """What every model of one comparison is measured with. `data`: the task's held-out data
    (`task.measuring.evaluation_data(data_args)`); `layers`: 'trained', 'all' or indices (`--layers`); `sigma`: one
    scale for every model (None: measured on the first model by the caller)."""

    task: Any
    data: Any
    data_args: Any
    gammas: NoiseGrid
    curve_gammas: list[float]
    train_gamma: float
    seeds: int
    noise_mean: float
    sigma: float | None
    sigma_source: str | None
    layers: str = "trained"
    batch_size: int = 8
    max_length: int = 1024
    bf16: bool = False
    base_model: str | None = None
    flag: str = "--models"
    modality: NoiseModality = "both"
    image_sigma: float | None = None  # a VLM's, one for every model (None: measured on the first, `measure_model`)
    image_sigma_source: str | None = None

    @property
    def dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.bf16 else torch.float32

    def settings(self, bootstrap_samples: int, held_out_rows: int | None = None) -> RobustnessSettings:
        """The results' settings: how every model was measured."""
        return RobustnessSettings(
            description=f"{self.task.measuring.describe(self.data, self.data_args)}: N({self.noise_mean}, "
            f"(gamma sigma_x)^2); {self.seeds} noise seed(s) per level",
            task=self.task.name,
            dataset=dataclasses.asdict(self.data_args),
            gammas=self.gammas,
            curve_gammas=self.curve_gammas,
            seeds=self.seeds,
            train_gamma=self.train_gamma,
            noise_mean=self.noise_mean,
            sigma_x=self.sigma,
            sigma_x_source=self.sigma_source,
            dtype=str(self.dtype),
            batch_size=self.batch_size,
            max_length=self.max_length,
            bootstrap_samples=bootstrap_samples,
            held_out_rows=held_out_rows,
            noise_modality=self.modality,
            image_sigma=self.image_sigma,
            image_sigma_source=self.image_sigma_source,
        )

    def results(self, arms: dict[str, list[str]], bootstrap_samples: int, held_out_rows: int | None = None):
        """An empty `RobustnessResults` of these settings for `arms` ({arm: [model name]})."""
        task = self.task
        return RobustnessResults(
            settings=self.settings(bootstrap_samples, held_out_rows),
            versions=versions("torch", "transformers", "trl"),
            headline=task.headline,
            layer_curve=tuple(task.layer_curve),
            arms=arms,
        )


@dataclass
class Measured:
    """One model measured: its result, the task's snapshot for the figures (None for tasks without one) and how many
    held-out units it was measured on."""

    result: ModelResult
    snapshot: Any
    held_out_rows: int


def measure_model(m: Measurement, name: str, path: str, model=None, tokenizer=None) -> Measured:
    """`name` (the model at `path`, or `model` / `tokenizer` already loaded) at every level and noise seed of `m`:
    per-level summaries over the noise seeds and, per level, each unit's scores summed over the seeds (what the
    intervals resample). `m.sigma` must be set."""
    task = m.task
    if model is None:
        model, tokenizer = task.measuring.load_model(ModelSpec(name, path, m.base_model, m.flag), m.dtype)
    with tempfile.TemporaryDirectory() as scratch:
        check_modality(m.modality, model)
        layers = trained_layers(m.layers, path)
        measure = Measure(layers, m.batch_size, m.max_length, m.bf16, scratch, m.sigma, m.modality, m.image_sigma)
        trainer = task.measuring.measuring_trainer(model, tokenizer, m.data, measure)
        if m.image_sigma is None:  # a VLM's image scale, one for every model: measured on the first
            first = functools.partial(first_batch, trainer, trainer.eval_dataset, m.batch_size)
            trainer.noise.measure_images(model, first, always=True)
            m.image_sigma = trainer.noise.image_sigma
            m.image_sigma_source = f"measured on {name}'s first held-out images" if m.image_sigma else None
        batches = len(trainer.get_eval_dataloader())
        levels = []
        with tqdm(total=len(m.gammas) * m.seeds * batches, desc=f"evaluating {name}") as bar:
            for gamma in m.gammas:
                levels.append(
                    [evaluate_level(task, trainer, gamma, s, m.noise_mean, bar.update) for s in range(m.seeds)]
                )
        result = ModelResult(
            path=path,
            architecture=type(model).__name__,
            noise_sigma_x_recorded=getattr(training_report(path), "noise_sigma_x", None),  # its own training's
            layers=list(trainer.primal_dual.spec.layers),
            summary=summarize(levels, m.train_gamma, task.measuring.layer_curves),
            scores={NoiseGrid.key(lv[0].gamma): seed_sums(lv) for lv in levels},
        )
        snapshot = task.measuring.snapshot(model, trainer, m.data, m.curve_gammas, m.sigma, m.noise_mean)
        held_out = len(trainer.eval_dataset)
        del trainer
    return Measured(result, snapshot, held_out)


def seed_sums(per_seed) -> dict[str, list[float]]:
    """One level's unit scores summed over its noise seeds."""
    keys = per_seed[0].scores
    return {k: np.sum([r.scores[k] for r in per_seed], axis=0).tolist() for k in keys}


def finish(
    results: RobustnessResults,
    task: Task,
    pairs: list[tuple[str, str]],
    output_dir: str,
    figures: dict[str, str] | None = None,
) -> RobustnessResults:
    """Bands and comparisons (`pairs`, A - B) from the models' saved unit scores, then results.json, results.csv,
    the plots and the folder's report.html in `output_dir`."""
    n_boot = results.settings.bootstrap_samples
    results.bands = bands(results, task, n_boot)
    results.comparisons = compare(results, task, pairs, n_boot)
    write_report(results, output_dir, figures)
    return results
