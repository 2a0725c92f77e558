"""
The search, for every task: one Optuna study per arm (a constrained model per readout, and its ERM baseline), TPE
sampling, trials pruned from their intermediate validation scores, every trial trained on the training rows and
scored on a validation carve-off of them (`Searching.sweep_data`); the held-out / test data is never loaded here.

The study lives in an Optuna storage: a SQLite file in the sweep folder by default (a killed sweep resumes where it
stopped: finished trials are kept, the trial cut short is marked failed by its stopped heartbeat, or by `Unstarted`
when it was killed before its first beat), or any RDB URL shared by several machines running the same command (each
worker asks the storage for its next trial). A study ends with exactly `n_trials` finished trials however many
workers share it: a trial starts only while the finished and running trials numbered before it are fewer than
`n_trials`; one that would exceed them waits for the running ones (a killed worker's trial frees its place once its
heartbeat is stale) and is dropped, marked failed as surplus, when they finish.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from transformers import TrainerCallback

from ..constraints import ERM
from ..evaluation import ModelSummary, evaluate_level, summarize
from ..tasks import AnyTraining, Arm, Headline, Task
from ..utils.types import Kwargs
from .objectives import SWEEP_OBJECTIVES
from .space import Params, SearchSpace

if TYPE_CHECKING:  # what transformers hands every callback; Optuna's types (imported where it is used)
    from optuna import Study, Trial
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial
    from transformers import Trainer, TrainerControl, TrainerState, TrainingArguments

FINISHED = ("COMPLETE", "PRUNED")
GRACE_BEATS = 3  # a trial is stale after this many heartbeat intervals without a beat


class Surplus(Exception):
    """A trial started after the study already had its finished trials: dropped (marked failed), never run."""


@dataclass
class Objective:
    """What a trial is scored by, on the validation rows over the gamma grid (one noise seed per level)."""

    name: str  # one of `objectives.SWEEP_OBJECTIVES`
    gammas: list[float]
    train_gamma: float
    headline: Headline
    ood_floor: float = 0.0

    @property
    def maximize(self) -> bool:
        """The held-out loss is minimised; the headline's own statistics go its way (accuracy up, RMSE down)."""
        return not SWEEP_OBJECTIVES[self.name].minimized and self.headline.higher_is_better

    def __call__(self, summary: ModelSummary) -> float:
        return SWEEP_OBJECTIVES[self.name].score(summary, self.ood_floor)


def validation_summary(task: Task, trainer: Trainer, objective: Objective) -> ModelSummary:
    """The trainer's model on its validation rows at every gamma of the grid, noise seed 0 (the same noisy inputs
    for every trial), summarised as `eval robustness` does."""
    model = trainer.model
    if model is None:
        raise ValueError("a trial's trainer has no model to score.")
    was_training = model.training
    levels = [[evaluate_level(task, trainer, g, seed=0)] for g in objective.gammas]
    model.train(was_training)
    return summarize(levels, objective.train_gamma)


class _Report(TrainerCallback):
    """At `steps`, scores the model on the validation rows, reports it to the trial and stops a hopeless one."""

    def __init__(self, task: Task, trial: Trial, objective: Objective, steps: set[int]) -> None:
        self.task, self.trial, self.objective, self.steps = task, trial, objective, steps
        self.trainer: Trainer | None = None
        self.pruned = False

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> TrainerControl:
        if state.global_step in self.steps and self.trainer is not None:
            value = self.objective(validation_summary(self.task, self.trainer, self.objective))
            self.trial.report(value, state.global_step)
            if self.trial.should_prune():
                self.pruned = True
                control.should_training_stop = True
        return control


def trial_args(base: AnyTraining, arm: Arm, params: Params, output_dir: str) -> AnyTraining:
    """The recipe's trainer config with the trial's values, the arm's constraints, and no checkpoints."""
    changes: Kwargs = {  # the sampled values are fields of the config (`space.SearchSpace`), of their own types
        **params,
        "constraints": base.constraints if arm.constrained else ERM,
        "output_dir": output_dir,
        "save_strategy": "no",
        "eval_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
    }
    return dataclasses.replace(base, **changes)


def run_trial(
    task: Task,
    trial: Trial,
    data: Any,  # the task's sweep data (`Searching.sweep_data`)
    arm: Arm,
    space: SearchSpace,
    base_args: AnyTraining,
    objective: Objective,
    sweep_dir: str,
    evaluations: int,
) -> float:
    """One trial: the arm trained with the sampled values, scored on the validation rows (pruned on the way)."""
    import optuna

    params = space.suggest(trial)
    args = trial_args(base_args, arm, params, os.path.join(sweep_dir, "trials", arm.name, str(trial.number)))
    steps_total = _total_steps(args, len(data.train))
    every = max(1, math.ceil(steps_total / evaluations))
    report = _Report(task, trial, objective, set(range(every, steps_total, every)))
    trainer = task.searching.trial_trainer(data, arm, args, [report])
    report.trainer = trainer  # the callback scores the model through the trainer that trains it
    trainer.train()
    if report.pruned:
        raise optuna.TrialPruned(f"pruned at step {trainer.state.global_step}")
    summary = validation_summary(task, trainer, objective)
    key = task.headline.key
    for name, value in (
        ("auc", summary.auc),
        (f"id_{key}", summary.id_metric),
        (f"ood_{key}", summary.ood_metric),
        ("descent_share", summary.descent_share),
        ("loss", summary.loss),
    ):
        trial.set_user_attr(name, value)
    trial.set_user_attr("seconds", trainer.state.log_history[-1].get("train_runtime"))
    return objective(summary)


def _total_steps(args: TrainingArguments, rows: int) -> int:
    if args.max_steps and args.max_steps > 0:
        return args.max_steps
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
    return max(1, math.ceil(rows / per_step) * math.ceil(args.num_train_epochs))


def open_study(name: str, storage: str, seed: int, pruner: str, objective: Objective, heartbeat: int = 10) -> Study:
    """The arm's study, created or loaded (so a killed sweep resumes); TPE with each trial seeded from `seed` and its
    number (`sampler.TrialSeededTPE`: workers never draw alike), median pruning after 2 trials. A study made for
    another objective is refused: its values could not be compared."""
    import optuna

    from .sampler import TrialSeededTPE

    if storage.startswith("sqlite:///"):
        os.makedirs(os.path.dirname(os.path.abspath(storage[len("sqlite:///") :])), exist_ok=True)
    rdb = rdb_storage(storage, heartbeat)
    study = optuna.create_study(
        study_name=name,
        storage=rdb,
        sampler=TrialSeededTPE(seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2) if pruner == "median" else optuna.pruners.NopPruner(),
        direction="maximize" if objective.maximize else "minimize",
        load_if_exists=True,
    )
    recorded = study.user_attrs.get("objective")
    if recorded is None:
        study.set_user_attr("objective", objective.name)
    elif recorded != objective.name:
        raise ValueError(
            f"`objective`: study {name!r} in the storage was searched with objective {recorded!r}, not "
            f"{objective.name!r}; pass `--objective {recorded}` to resume it, or a new `--study_name`."
        )
    return study


def rdb_storage(url: str, heartbeat: int, attempts: int = 5) -> BaseStorage:
    """Optuna's RDB storage with heartbeats (they mark a killed worker's trial failed). Workers started together
    race to create its tables on an empty database; the loser sees the winner's tables on a retry."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    def open_rdb() -> BaseStorage:
        with warnings.catch_warnings():  # heartbeats are marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(url, heartbeat_interval=heartbeat, grace_period=GRACE_BEATS * heartbeat)

    for attempt in range(attempts - 1):
        try:
            return open_rdb()
        except SQLAlchemyError:
            time.sleep(1.0 + attempt)
    return open_rdb()


def finished(study: Study) -> int:
    return sum(t.state.name in FINISHED for t in study.get_trials(deepcopy=False))


@runtime_checkable
class Heartbeats(Protocol):
    """A storage with heartbeats (Optuna's RDB storage and its cache; the base class that says so is private)."""

    def get_heartbeat_interval(self) -> int | None: ...

    def record_heartbeat(self, trial_id: int) -> None: ...


def heartbeat_interval(storage: BaseStorage) -> int | None:
    """The storage's heartbeat interval in seconds, or None where it has no heartbeats (in-memory, or none set)."""
    return storage.get_heartbeat_interval() if isinstance(storage, Heartbeats) else None


def announce(trial: Trial, worker: str) -> None:
    """Records the trial's first heartbeat now, then tags it with its worker: Optuna's heartbeat thread writes that
    beat concurrently with the objective, so a tagged trial might otherwise have none yet. A tagged trial is thus
    watched by Optuna's `fail_stale_trials`, an untagged one by `Unstarted`."""
    storage = trial.storage  # Optuna's public handle on the study's storage
    if isinstance(storage, Heartbeats) and heartbeat_interval(storage) is not None:
        study_id = storage.get_study_id_from_name(trial.study.study_name)
        storage.record_heartbeat(storage.get_trial_id_from_study_id_trial_number(study_id, trial.number))
    trial.set_user_attr("worker", worker)


class Unstarted:
    """
    Fails RUNNING trials whose worker stopped before they started. Optuna creates a trial RUNNING in `ask`; its
    heartbeat thread writes the first beat a moment later. A worker killed in between leaves a trial with no
    heartbeat, which `fail_stale_trials` skips for good (Optuna tests that it does), so the trial would hold a place
    in the study forever and `claim` would wait on it forever. A live worker tags its trial (`announce`) within
    milliseconds of `ask`; a trial this process sees untagged and RUNNING for the stale grace period, timed on its
    own clock (never another machine's timestamps), is failed.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.first_seen: dict[int, float] = {}  # trial number -> when this process first saw it untagged

    def fail(self, study: Study, trials: Sequence[FrozenTrial], storage: BaseStorage) -> None:
        from optuna.trial import TrialState

        interval = heartbeat_interval(storage)
        if interval is None:  # no heartbeats: nothing is ever stale
            return
        now = self.clock()
        for t in trials:
            if t.state.name != "RUNNING" or "worker" in t.user_attrs:
                self.first_seen.pop(t.number, None)
                continue
            if now - self.first_seen.setdefault(t.number, now) >= GRACE_BEATS * interval:
                study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)  # another worker may have
                print(f"Trial {t.number} failed: its worker stopped before the trial's first heartbeat.")


def claim(study: Study, trial: Trial, n_trials: int, poll: float = 2.0, unstarted: Unstarted | None = None) -> bool:
    """
    Whether `trial` may run: True once the finished and running trials numbered before it are fewer than
    `n_trials`, False once the finished ones alone reach it. Between the two it waits, failing stale trials (a
    killed worker's, whether it had beaten or not) so that their places free up.
    """
    import optuna

    unstarted = unstarted or Unstarted()
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        earlier = [t for t in study.get_trials(deepcopy=False) if t.number < trial.number]
        done = sum(t.state.name in FINISHED for t in earlier)
        if done + sum(t.state.name == "RUNNING" for t in earlier) < n_trials:
            return True
        if done >= n_trials:
            return False
        unstarted.fail(study, earlier, trial.storage)
        time.sleep(poll)


def search(study: Study, n_trials: int, trial_fn: Callable[[Trial], float], desc: str, poll: float = 2.0) -> None:
    """Runs trials until the study holds `n_trials` finished ones (counting those other workers finished)."""
    import optuna
    from tqdm.auto import tqdm

    done = finished(study)
    if done >= n_trials:
        return
    states = tuple(getattr(optuna.trial.TrialState, s) for s in FINISHED)
    worker = f"{socket.gethostname()}:{os.getpid()}"
    unstarted = Unstarted()

    def guarded(trial: Trial) -> float:
        announce(trial, worker)
        if not claim(study, trial, n_trials, poll, unstarted):
            trial.set_user_attr("surplus", True)
            raise Surplus(f"the study already holds {n_trials} finished trials")
        return trial_fn(trial)

    with tqdm(total=n_trials, initial=done, desc=desc, unit="trial") as bar:

        def progress(study: Study, trial: FrozenTrial) -> None:
            bar.n = finished(study)
            bar.refresh()

        quiet = _QuietSurplus()  # Optuna logs a caught exception with its traceback; a surplus trial is no error
        logger = logging.getLogger("optuna.study._optimize")
        logger.addFilter(quiet)
        try:
            study.optimize(
                guarded,
                callbacks=[optuna.study.MaxTrialsCallback(n_trials, states=states), progress],
                catch=(Surplus,),
                gc_after_trial=True,
            )
        finally:
            logger.removeFilter(quiet)


class _QuietSurplus(logging.Filter):
    """Replaces Optuna's failure report of a surplus trial (a warning with a traceback) by one plain line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, Surplus):
            print(f"{record.getMessage().split(' failed')[0]} not run: {error}.")
            return False
        return True


def best_params(study: Study, maximize: bool) -> Params:
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if not complete:
        raise RuntimeError(f"Study {study.study_name!r} has no complete trial: every trial failed or was pruned.")
    pick = max if maximize else min
    return dict(pick(complete, key=lambda t: math.nan if t.value is None else t.value).params)
