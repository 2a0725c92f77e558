"""
`constrained-sft sweep`, for every task: search a recipe's hyperparameters on a validation carve-off of its training
data, then (with `baseline='erm'`) retrain the best configurations with several seeds and compare them on the
held-out data with confidence intervals. Writes into `sweep_dir`: the study storage, `trials-<arm>.csv`, Optuna's
plots, `test/` (the `eval robustness` report of every retrained model), `comparison.json`, and `report.md`.

The stages are calls to the sweep's launcher (`launch`; `stages`): the search as `--workers` calls of `search_job`
(one in this process; on Slurm, N jobs) against the sweep's storage, each the same search (a worker's trials counted
with the others'), then, with `--stage all` / `compare`, the retraining and comparison as one call of `compare_job`,
whose results come back to the command. A launcher whose jobs outlive the command (Slurm) keeps them in
`slurm/jobs.json` and finds them again in the queue: a second call follows the workers still queued or running and
submits none once the search holds its trials. Where it does not follow its jobs (`--wait false`), the command
summarises the trials so far and returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from functools import partial
from typing import cast

from ..comparison import compared_pairs
from ..launch import Call, JobEnded, JobsError, Launcher, Request, open_launcher
from ..launch import check as check_launcher
from ..tasks import AnyRecipe, Task, get_task
from ..utils.redact import redact_url
from ..utils.slurm_options import SlurmArguments
from .arguments import SweepArguments
from .cluster import FINALS, STORAGE_ENV, WORKER, check_storage, follow, storage_in_env
from .compare import Finals, compare, erm_twins
from .report import trials_summary, write_report
from .results import SweepResults
from .search import run_trial, search
from .setup import Sweep, prepare, searched_all


def run(
    settings: SweepArguments,
    task: Task,
    recipe: AnyRecipe,
    more: dict[str, AnyRecipe] | None = None,
    launcher: SlurmArguments | None = None,
) -> SweepResults:
    """Search (`stage` search / all), then retrain and compare (compare / all); everything checked before any
    trial, nothing written on a refusal. `more`: the `--arm` recipes by name; `launcher`: where the stages run
    (`launch.open_launcher`: this process, or Slurm jobs; `stages`)."""
    options = launcher or SlurmArguments()
    sweep = prepare(settings, task, recipe, more or {})
    request = Request(sweep.plan.sweep_dir, "--sweep_dir", what="job")
    if check_launcher(options, request).detached:  # workers on other machines share one storage server
        check_storage(sweep.plan.storage)
    where = open_launcher(options, request)  # asked before the folder is marked or a job submitted
    sweep.folder.mark()
    return stages(where, sweep, settings, task, recipe, more or {})


def search_here(sweep: Sweep, task: Task, recipe: AnyRecipe) -> None:
    """The search stage in this process: each arm's trials until its study holds `n_trials` (other workers'
    count)."""
    options = sweep.plan.options
    data = task.searching.sweep_data(recipe, options.validation_size)
    for arm in sweep.arms:
        trial = partial(
            run_trial,
            task,
            data=data,
            arm=arm,
            space=sweep.searched[arm.name],
            base_args=sweep.bases[arm.name],
            objective=sweep.objective,
            sweep_dir=sweep.plan.sweep_dir,
            evaluations=options.evaluations_per_trial,
        )
        search(sweep.studies[arm.name], options.n_trials, trial, desc=f"sweep {arm.name}")


def summary(sweep: Sweep, task: Task, recipe: AnyRecipe, more: dict[str, AnyRecipe], compared: bool) -> SweepResults:
    """Each arm's trials (`trials_summary`) and, where `compared`, the finals retrained and compared (`compare`);
    the report written."""
    options = sweep.plan.options
    out = SweepResults(dataclasses.replace(options, storage=redact_url(sweep.plan.storage)), {})  # no password
    for arm in sweep.arms:
        out.arms[arm.name] = trials_summary(
            sweep.studies[arm.name],
            arm,
            sweep.plan.sweep_dir,
            sweep.searched[arm.name].names,
            sweep.not_searched[arm.name],
            sweep.objective.maximize,
        )
    if compared:
        data = task.searching.sweep_data(recipe, options.validation_size)
        pairs = compared_pairs([a.name for a in sweep.arms], sweep.reference, erm_twins(sweep.arms, more))
        finals = Finals(
            task, sweep.arms, sweep.studies, sweep.objective, sweep.plan, data, sweep.bases, recipe.script, pairs
        )
        compare(finals, out)
    write_report(out, sweep.plan.sweep_dir)
    return out


def in_job(settings: SweepArguments, task: str, recipe: AnyRecipe, more: dict[str, AnyRecipe]) -> tuple[Sweep, Task]:
    """A stage's call: the sweep prepared again where it runs (`run.prepare`), its storage URL whole from the
    environment."""
    storage = (os.environ.get(STORAGE_ENV) or settings.storage) if settings.storage else None
    found = get_task(task)
    return prepare(dataclasses.replace(settings, storage=storage), found, recipe, more), found


def search_job(settings: SweepArguments, task: str, recipe: AnyRecipe, more: dict[str, AnyRecipe]) -> None:
    """A search worker: trials until every arm's study holds its `n_trials` (`run.search_here`)."""
    sweep, found = in_job(settings, task, recipe, more)
    search_here(sweep, found, recipe)


def compare_job(settings: SweepArguments, task: str, recipe: AnyRecipe, more: dict[str, AnyRecipe]) -> SweepResults:
    """The finals: each arm's best retrained and compared, the trials summarised, the report written."""
    sweep, found = in_job(settings, task, recipe, more)
    return summary(sweep, found, recipe, more, compared=True)


def stages(
    where: Launcher, sweep: Sweep, settings: SweepArguments, task: Task, recipe: AnyRecipe, more: dict[str, AnyRecipe]
) -> SweepResults:
    """The stages `settings.stage` names, through `where` (see the module docstring)."""
    given = settings.storage
    safe = dataclasses.replace(settings, storage=redact_url(given) if given else None)  # what a call carries
    with storage_in_env(given), contextlib.closing(where):
        if settings.stage in ("search", "all") and not searched_all(sweep):
            at_once = where.capabilities.at_once
            workers = settings.workers if at_once is None else min(settings.workers, at_once)
            call = (dataclasses.replace(safe, stage="search"), task.name, recipe, more)
            handles = where.submit([Call(f"{WORKER}-{k}", search_job, call) for k in range(workers)])
            ended = follow(where, handles, enough=lambda: searched_all(sweep))
            if ended is None:
                return summary(sweep, task, recipe, more, compared=False)
            if not searched_all(sweep):
                raise JobsError(
                    "the search workers ended before the search held its trials: " + "; ".join(ended) + ". The same "
                    "command submits workers again; the trials finished so far are kept."
                )
        if settings.stage == "search":
            return summary(sweep, task, recipe, more, compared=False)
        call = (dataclasses.replace(safe, stage="compare"), task.name, recipe, more)
        [finals] = where.submit([Call(FINALS, compare_job, call)])
        if follow(where, [finals]) is None:
            return summary(sweep, task, recipe, more, compared=False)
        try:
            return cast(SweepResults, finals.result())
        except JobEnded as why:
            raise JobsError(
                f"the finals' job ended unfinished: {why}. The same command submits it again; finished retrainings "
                "are kept."
            ) from None
