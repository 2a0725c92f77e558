"""
The tasks: one module per kind of recipe, behind one small protocol (`base.Task`), and the registry that maps a
recipe's `task` to it. A task owns its recipe fields, model building, training, the trainer that measures a saved
model, per-example scoring and its headline metric with its direction:

- `sft` (the default): causal-LM fine-tuning with `ConstrainedSFTTrainer`; per-sequence token scores, token accuracy;
- `classification`: sequence classifiers with `ConstrainedTrainer`; per-example hits, accuracy;
- `video`: video denoisers with `ConstrainedTrainer`; per-clip squared error, RMSE (lower is better).

Everything above this floor (`evaluation`, `sweep`, `cli`) is task-agnostic: it asks `get_task(name)` and calls the
protocol; this registry is the only place a task is chosen by its name.

May import: `utils`, `config`, `constraints`, `readout`, `noise`, `data`, `models`, `trainers`.
"""

from collections.abc import Mapping
from types import MappingProxyType

from .base import (
    AnyRecipe,
    AnyTraining,
    Arm,
    Headline,
    Measure,
    Recipe,
    SharedDataTraining,
    Task,
    TrainedModel,
    measure_only,
    output_dir,
)
from .classification import ClassificationTask, ClassifierScriptArguments, build_classifier
from .sft import ScriptArguments, SFTTask
from .training import finish, is_finished, summary_table, train_and_report
from .video import VideoScriptArguments, VideoTask, build_denoiser

# A fixed table, read-only (`MappingProxyType`): its entries are task objects, not classes a plug-in registers, so
# `utils.registry.Registry`, which checks classes, is not theirs; another one is another row here.
TASKS: Mapping[str, Task] = MappingProxyType(
    {task.name: task for task in (SFTTask(), ClassificationTask(), VideoTask())}
)
DEFAULT_TASK = SFTTask.name


def allowed_tasks() -> str:
    """The task names as a message lists them: "'sft', 'classification' or 'video'"."""
    names = [repr(n) for n in TASKS]
    return f"{', '.join(names[:-1])} or {names[-1]}"


def get_task(name: str | None) -> Task:
    """The registered task `name` (None: the default, SFT); an unknown name is refused with the allowed ones."""
    if name is None:
        return TASKS[DEFAULT_TASK]
    if name not in TASKS:
        raise ValueError(f"`task` must be {allowed_tasks()}, got {name!r}.")
    return TASKS[name]


__all__ = [
    "DEFAULT_TASK",
    "TASKS",
    "Arm",
    "ClassificationTask",
    "ClassifierScriptArguments",
    "Headline",
    "Measure",
    "AnyRecipe",
    "AnyTraining",
    "Recipe",
    "output_dir",
    "SFTTask",
    "SharedDataTraining",
    "ScriptArguments",
    "Task",
    "TrainedModel",
    "VideoScriptArguments",
    "VideoTask",
    "allowed_tasks",
    "build_classifier",
    "build_denoiser",
    "finish",
    "is_finished",
    "get_task",
    "measure_only",
    "summary_table",
    "train_and_report",
]
