"""
The comparison protocol (the paper's Appendix B.3, with intervals), for every task: each arm's best configuration
is retrained with seeds 0..S-1, every retrained model is evaluated on the held-out (test) data by `eval robustness`
(the same noisy inputs for every model), and each constrained arm is compared with its ERM twin by the evaluation's
paired bootstrap over training seeds and held-out units.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..comparison import RunKey, readout_arm
from ..evaluation import RobustnessArguments, RobustnessResults, saved_results
from ..evaluation import run as robustness
from ..tasks import AnyRecipe, AnyTraining, Arm, Task, is_finished
from ..utils.files import read_json, write_json
from ..utils.output_folders import OutputDirError, child_path, normalized
from .results import SweepResults
from .search import Objective, best_params, trial_args
from .space import Params

if TYPE_CHECKING:
    import optuna

    from .arguments import SweepPlan


FINAL_PARAMS = "params.json"  # final/<arm>/params.json: the configuration its retrained models were trained with


@dataclass(frozen=True)
class Finals:
    """What the compare stage works from: the task and its arms, each arm's Optuna study and its base trainer config,
    the objective, the plan, the sweep's data and the recipe's script fields, and the arms' pairs (`compared_pairs`)."""

    task: Task
    arms: list[Arm]
    studies: dict[str, optuna.Study]
    objective: Objective
    plan: SweepPlan
    data: Any  # the task's sweep data (`Task.searching.sweep_data`)
    bases: dict[str, AnyTraining]
    script: Any  # the recipe's own fields
    pairs: list[tuple[str, str]]


def compare(finals: Finals, out: SweepResults) -> None:
    """Each arm's best configuration retrained with the final seeds (every arm's retrained models checked before any
    is trained), then the pairs compared on the held-out data with intervals, into `out` (saved)."""
    task, arms, plan = finals.task, finals.arms, finals.plan
    best = {arm.name: best_params(finals.studies[arm.name], finals.objective.maximize) for arm in arms}
    for arm in arms:
        check_final(plan.sweep_dir, arm.name, best[arm.name])
    for arm in arms:
        retrain(task, arm, best[arm.name], plan, finals.data, finals.bases[arm.name])
    results = evaluate_finals(task, arms, plan, finals.objective.train_gamma, finals.script, finals.pairs)
    out.comparisons, out.test_report = results.comparisons, results.files
    plot = results.files[task.headline.key]
    out.arm_plot = plot if isinstance(plot, str) else None  # a plot's path (the "figures" entry is a table)
    out.save(plan.sweep_dir)


def erm_twins(arms: list[Arm], more: dict[str, AnyRecipe]) -> dict[str, str]:
    """{constrained arm: the ERM twin of its readout} for the recipe's arms that have one (`--arm`s have none: they
    are compared with the reference)."""
    names = {a.name for a in arms} - set(more)
    return {
        a.name: readout_arm(False, a.readout)
        for a in arms
        if a.constrained and a.name in names and readout_arm(False, a.readout) in names
    }


def check_final(sweep_dir: str, arm: str, params: Params) -> None:
    """The arm's retrained models, if any, are of its current best configuration: a search continued since may have
    found another, and mixing their seeds (or comparing a stale one) would be silent. Refused, naming both."""
    path = child_path(sweep_dir, "final", arm, FINAL_PARAMS)
    if not os.path.isfile(path):
        return
    saved = read_json(path, "--sweep_dir")
    if saved != normalized(params):
        raise OutputDirError(
            f"`--sweep_dir` {os.path.dirname(path)} holds models retrained with {saved}, but the best configuration of "
            f"`{arm}` is now {normalized(params)} (the search went on): move that folder aside to retrain the new "
            "best, or compare with another --sweep_dir."
        )


def retrain(task: Task, arm: Arm, params: Params, plan: SweepPlan, data: Any, base: AnyTraining) -> None:
    """The arm's best configuration with seeds 0..S-1 (a seed the search chose is replaced), each saved; a seed
    whose model is already saved is kept, so a killed comparison resumes (`check_final`: of the same
    configuration)."""
    os.makedirs(child_path(plan.sweep_dir, "final", arm.name), exist_ok=True)
    write_json(child_path(plan.sweep_dir, "final", arm.name, FINAL_PARAMS), normalized(params))
    for seed in range(plan.options.final_seeds):
        folder = seed_dir(plan.sweep_dir, arm.name, seed)
        if is_finished(folder):
            continue
        trainer = task.searching.trial_trainer(data, arm, trial_args(base, arm, {**params, "seed": seed}, folder))
        trainer.train()
        trainer.save_model(folder)


def run_name(arm: str, seed: int) -> str:
    """A retrained model's name in the test results: '<arm>/seed<s>'."""
    return RunKey(seed, arm).name


def seed_dir(sweep_dir: str, arm: str, seed: int) -> str:
    return RunKey(seed, arm).folder(sweep_dir, "final")


def evaluate_finals(
    task: Task,
    arms: list[Arm],
    plan: SweepPlan,
    train_gamma: float,
    data_args: Any,  # the recipe's own fields, whose held-out split is the test data
    pairs: list[tuple[str, str]],
) -> RobustnessResults:
    """`eval robustness` on the held-out data over every retrained model, arms of `final_seeds` models each; the
    comparisons of `pairs`. A finished evaluation of the same models and levels (`test/results.json`) is reused,
    its comparisons recomputed from its saved unit scores, so re-running the comparison does not evaluate again."""
    arms_of_models = {
        a.name: [(run_name(a.name, s), seed_dir(plan.sweep_dir, a.name, s)) for s in range(plan.options.final_seeds)]
        for a in arms
    }
    out, n_boot = os.path.join(plan.sweep_dir, "test"), plan.options.bootstrap_samples
    if saved := saved_results(out, arms_of_models, plan.gammas, 1, task, pairs, n_boot):
        return saved
    args = RobustnessArguments(
        task=task.name,
        output_dir=out,
        gammas=plan.gammas,
        train_gamma=train_gamma,
        seeds=1,
        batch_size=plan.options.eval_batch_size,
        curve_gammas=[plan.gammas[0], plan.gammas[-1]],
        bootstrap_samples=n_boot,
    )
    return robustness(args, data_args, arms=arms_of_models, pairs=pairs, claim=False)  # the sweep owns the folder
