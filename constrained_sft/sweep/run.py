"""
`constrained-sft sweep`, for every task: search a recipe's hyperparameters on a validation carve-off of its training
data, then (with `baseline='erm'`) retrain the best configurations with several seeds and compare them on the
held-out data with confidence intervals. Writes into `sweep_dir`: the study storage, `trials-<arm>.csv`, Optuna's
plots, `test/` (the `eval robustness` report of every retrained model), `comparison.json`, and `report.md`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ..comparison import ERM, check_comparison_folder, compared_pairs, readout_arm, reference_arm, sweep_arms
from ..config import training_level
from ..data.splits import refuse_streamed_selection
from ..evaluation.report import (
    Block,
    Document,
    Heading,
    Image,
    Preformatted,
    Table,
    Text,
    comparison_blocks,
    write_markdown,
)
from ..tasks import AnyRecipe, Arm, Recipe, Task, is_finished
from ..utils.files import atomic_path, read_json, write_json
from ..utils.folders import (
    OutputDirError,
    child_path,
    normalized,
)
from ..utils.redact import redact_url
from ..utils.slurm import SlurmArguments, check_cluster
from .arguments import SweepArguments, SweepPlan
from .cluster import check_storage, on_slurm
from .compare import evaluate_finals, seed_dir
from .objectives import SWEEP_OBJECTIVES
from .results import ArmTrials, SweepResults, Trial
from .search import Objective, best_params, finished, run_trial, search, trial_args
from .space import Params, arm_spaces, check_ranges, load_space

if TYPE_CHECKING:
    import optuna
    from transformers import TrainingArguments


def run(
    settings: SweepArguments,
    task: Task,
    recipe: AnyRecipe,
    more: dict[str, AnyRecipe] | None = None,
    launcher: SlurmArguments | None = None,
) -> SweepResults:
    """Search (`stage` search / all), then retrain and compare (compare / all); everything checked before any
    trial, nothing written on a refusal. `more`: the `--arm` recipes by name; `launcher`: here, or the stages as
    Slurm jobs (`cluster`)."""
    more = more or {}
    # every input checked before any trial, nothing written on a refusal; then the folder checked and marked
    arms = sweep_arms(task, recipe, settings.readouts, settings.baseline == ERM, more)
    plan = settings.plan(recipe.training.output_dir, recipe.training.noise_gamma)  # checked and resolved once
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
    cluster = None
    if launcher is not None and launcher.launcher == "slurm":  # asked before the folder is marked or a job submitted
        check_storage(plan.storage)
        cluster = check_cluster(launcher, os.path.abspath(plan.sweep_dir), "--sweep_dir")
        cluster.check_request(cluster.gpus(1, "--slurm_gpus"), "--launcher slurm")  # sbatch's word, before any job
    folder.mark()
    train_gamma = training_level(recipe.training.noise_gamma)
    objective = Objective(options.objective, plan.gammas, train_gamma, task.headline, options.ood_floor)
    studies = {arm.name: plan.study(arm.name, objective) for arm in arms}
    if cluster is not None:

        def search_done() -> bool:
            return all(finished(study) >= options.n_trials for study in studies.values())

        given = dataclasses.replace(settings, storage=plan.storage)
        if (done := on_slurm(cluster, plan.sweep_dir, given, task.name, recipe, more, search_done, run)) is not None:
            return done
    data = task.searching.sweep_data(recipe, options.validation_size) if cluster is None else None
    bases = {
        a.name: dataclasses.replace(a.training or recipe.training, per_device_eval_batch_size=options.eval_batch_size)
        for a in arms
    }
    if options.stage in ("search", "all") and cluster is None:
        for arm in arms:
            trial = partial(
                run_trial,
                task,
                data=data,
                arm=arm,
                space=searched[arm.name],
                base_args=bases[arm.name],
                objective=objective,
                sweep_dir=plan.sweep_dir,
                evaluations=options.evaluations_per_trial,
            )
            search(studies[arm.name], options.n_trials, trial, desc=f"sweep {arm.name}")
    out = SweepResults(dataclasses.replace(options, storage=redact_url(plan.storage)), {})  # reports carry no password
    for arm in arms:
        out.arms[arm.name] = trials_summary(
            studies[arm.name],
            arm,
            plan.sweep_dir,
            searched[arm.name].names,
            not_searched[arm.name],
            objective.maximize,
        )
    if options.stage in ("compare", "all") and cluster is None:
        pairs = compared_pairs([a.name for a in arms], reference, erm_twins(arms, more))
        compare(Finals(task, arms, studies, objective, plan, data, bases, recipe.script, pairs), out)
    write_report(out, plan.sweep_dir)
    return out


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
    bases: dict[str, TrainingArguments]
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


def check_objective(settings: SweepArguments, task: Task) -> None:
    """An objective that floors an accuracy is refused for a task whose headline is lower-is-better."""
    if SWEEP_OBJECTIVES[settings.objective].floors_accuracy and not task.headline.higher_is_better:
        usable = [name for name, kind in SWEEP_OBJECTIVES.items() if not kind.floors_accuracy]
        raise ValueError(
            f"`objective: {settings.objective}` floors an accuracy; `task: {task.name}` reports {task.headline.key} "
            f"(lower is better): use one of {usable}."
        )


def erm_twins(arms: list[Arm], more: dict[str, Recipe]) -> dict[str, str]:
    """{constrained arm: the ERM twin of its readout} for the recipe's arms that have one (`--arm`s have none: they
    are compared with the reference)."""
    names = {a.name for a in arms} - set(more)
    return {
        a.name: readout_arm(False, a.readout)
        for a in arms
        if a.constrained and a.name in names and readout_arm(False, a.readout) in names
    }


COMMAND = "sweep"
FINAL_PARAMS = "params.json"  # final/<arm>/params.json: the configuration its retrained models were trained with


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


def retrain(task: Task, arm: Arm, params: Params, plan: SweepPlan, data, base) -> None:
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


def trials_summary(
    study, arm: Arm, sweep_dir: str, searched: list[str], not_searched: list[str], maximize: bool = True
) -> ArmTrials:
    """Trials as rows (also `trials-<arm>.csv`), the best trial, and Optuna's history / importance plots."""
    import csv

    trials = [
        Trial(t.number, t.state.name, t.value, dict(t.params), dict(t.user_attrs))
        for t in study.get_trials(deepcopy=False)
    ]
    rows = [t.row() for t in trials]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    os.makedirs(sweep_dir, exist_ok=True)
    with atomic_path(os.path.join(sweep_dir, f"trials-{arm.name}.csv")) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    scored = [(t.value, t) for t in trials if t.state == "COMPLETE" and t.value is not None]
    best = (max if maximize else min)(scored, key=lambda pair: pair[0])[1] if scored else None
    return ArmTrials(trials, best, optuna_plots(study, arm.name, sweep_dir), searched, not_searched)


def optuna_plots(study, arm: str, sweep_dir: str) -> dict[str, str]:
    """Optuna's optimisation history and parameter importances as PNGs; importances need >= 2 complete trials."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from optuna.visualization import matplotlib as ovm

    files = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
        for kind, plot in (("history", ovm.plot_optimization_history), ("importances", ovm.plot_param_importances)):
            try:
                ax = plot(study)
            except (ValueError, RuntimeError):  # too few complete trials, or a single searched value
                continue
            fig = (ax if isinstance(ax, Axes) else ax.flat[0]).figure  # an Axes, or an array of them
            if not isinstance(fig, Figure):
                raise TypeError(f"Optuna's {kind} plot is not on a figure of its own ({type(fig).__name__}).")
            path = os.path.join(sweep_dir, f"{kind}-{arm}.png")
            fig.set_size_inches(7, 4)
            fig.tight_layout()
            with atomic_path(path) as tmp:
                fig.savefig(tmp, dpi=110, format="png")
            plt.close(fig)
            files[kind] = path
    return files


def write_report(out: SweepResults, sweep_dir: str) -> str:
    """`report.md`: each arm's trials and best configuration, the plots, and the comparison with intervals."""
    settings = json.dumps({k: v for k, v in dataclasses.asdict(out.settings).items() if v is not None})
    blocks: list[Block] = [Heading("Sweep report", 1), Text("Settings:"), Preformatted(settings)]
    for arm, info in out.arms.items():
        blocks += [Heading(arm), Text(searched_line(info)), trial_table(info.trials)]
        if info.best:
            blocks.append(Text(f"Best trial {info.best.trial}: value {info.best.value:.4f}"))
        blocks += [Image(p, kind) for kind, p in info.plots.items()]
    if out.comparisons is not None:  # `compared`
        n_boot = out.settings.bootstrap_samples
        blocks += [Heading("Held-out data: constrained - ERM (paired bootstrap, 95%)")]
        blocks += comparison_blocks(out.comparisons, n_boot, level=3)
        blocks += [Image(out.arm_plot, "headline vs gamma")] if out.arm_plot else []
    return write_markdown(os.path.join(sweep_dir, "report.md"), Document("Sweep report", blocks))


def searched_line(info: ArmTrials) -> str:
    """What an arm searched, and what of its fallback section it left out because it never reads it."""
    line = f"Searched: {', '.join(info.searched)}."
    if info.not_searched:
        line += f" Not searched (the arm does not read them): {', '.join(info.not_searched)}."
    return line


def trial_table(trials: list[Trial]) -> Block:
    if not trials:
        return Text("(no trials)")
    rows = [t.row() for t in trials]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return Table(keys, [[r.get(k) for k in keys] for r in rows], number=".4g")
