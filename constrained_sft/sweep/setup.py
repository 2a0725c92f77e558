"""
A sweep's inputs checked and resolved once (`prepare`: nothing written, the folder checked, not marked), what the
command and each stage's job work from (`Sweep`), and whether the search holds its trials (`searched_all`).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..comparison import ERM, check_comparison_folder, reference_arm, sweep_arms
from ..config import training_level
from ..data.splits import refuse_streamed_selection
from ..tasks import AnyRecipe, AnyTraining, Arm, Task, output_dir
from .arguments import SweepArguments, SweepPlan
from .objectives import SWEEP_OBJECTIVES
from .search import Objective, finished
from .space import SearchSpace, arm_spaces, check_ranges, load_space

if TYPE_CHECKING:
    import optuna

    from ..comparison.comparison_folder import CheckedFolder


COMMAND = "sweep"


@dataclass(frozen=True)
class Sweep:
    """A sweep's inputs checked and resolved (`prepare`): its plan, arms and their spaces, the objective, each arm's
    Optuna study and base trainer config, the reference arm, and the folder (marked by `run`)."""

    plan: SweepPlan
    arms: list[Arm]
    searched: dict[str, SearchSpace]
    not_searched: dict[str, list[str]]
    objective: Objective
    bases: dict[str, AnyTraining]
    reference: str
    folder: CheckedFolder

    @functools.cached_property
    def studies(self) -> dict[str, optuna.Study]:
        """Each arm's Optuna study, opened (created where new) at first use: after the checks, the folder marked."""
        return {arm.name: self.plan.study(arm.name, self.objective) for arm in self.arms}


def prepare(settings: SweepArguments, task: Task, recipe: AnyRecipe, more: dict[str, AnyRecipe]) -> Sweep:
    """Every input checked before any trial, nothing written (the folder is checked, not marked; the storage is
    opened at the first use of `Sweep.studies`); what `run` and each stage's job work from."""
    arms = sweep_arms(task, recipe, settings.readouts, settings.baseline == ERM, more)
    plan = settings.plan(output_dir(recipe.training), recipe.training.noise_gamma)  # checked and resolved once
    options = plan.options
    reference = reference_arm(options.reference, [a.name for a in arms], twins_only=not more)
    check_objective(options, task)
    spaces = load_space(plan.space, type(recipe.training), sections=tuple(more))
    searched, not_searched = arm_spaces(spaces, arms, recipe.training)
    check_ranges({k: v for k, v in spaces.items() if k not in more}, recipe.training)  # every section, arm or not
    refuse_streamed_selection(recipe.script)
    recipes = {"recipe": recipe, **more}  # the ERM twins train the recipe
    folder_settings = options.folder_settings(recipes, spaces, settings.storage)
    folder = check_comparison_folder(plan.sweep_dir, COMMAND, folder_settings, "--sweep_dir", recipes)
    train_gamma = training_level(recipe.training.noise_gamma)
    objective = Objective(options.objective, plan.gammas, train_gamma, task.headline, options.ood_floor)
    bases = {
        a.name: dataclasses.replace(a.training or recipe.training, per_device_eval_batch_size=options.eval_batch_size)
        for a in arms
    }
    return Sweep(plan, arms, searched, not_searched, objective, bases, reference, folder)


def searched_all(sweep: Sweep) -> bool:
    """Whether every arm's study holds its `n_trials` finished trials (counting every worker's)."""
    return all(finished(study) >= sweep.plan.options.n_trials for study in sweep.studies.values())


def check_objective(settings: SweepArguments, task: Task) -> None:
    """An objective that floors an accuracy is refused for a task whose headline is lower-is-better."""
    if SWEEP_OBJECTIVES[settings.objective].floors_accuracy and not task.headline.higher_is_better:
        usable = [name for name, kind in SWEEP_OBJECTIVES.items() if not kind.floors_accuracy]
        raise ValueError(
            f"`objective: {settings.objective}` floors an accuracy; `task: {task.name}` reports {task.headline.key} "
            f"(lower is better): use one of {usable}."
        )
