"""
The search: one Optuna study per arm (a constrained model per readout, and its ERM baseline), TPE sampling, trials
pruned from their intermediate validation scores, every trial trained on the training rows and scored on a
validation split carved from the training split (`load_train_validation`); the test split is never loaded here.

The study lives in an Optuna storage: a SQLite file in the sweep folder by default (a killed sweep resumes where it
stopped: finished trials are kept, the trial cut short is marked failed by its stopped heartbeat), or any RDB URL
shared by several machines running the same command (Optuna's distributed mode: each worker asks the storage for
its next trial; the sweep stops when the study holds `n_trials` finished ones).
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DataCollatorWithPadding, TrainerCallback

from ..evaluation import build_classifier
from ..evaluation.metrics import summarize
from ..evaluation.robustness import evaluate_level
from ..trainers import ConstrainedTrainer
from .space import SearchSpace

FINISHED = ("COMPLETE", "PRUNED")


@dataclass(frozen=True)
class Arm:
    """One model family of the comparison: its readout, and whether the descent constraints are on."""

    name: str  # 'constrained-linear', 'erm-linear', ...
    readout: str
    constrained: bool


@dataclass
class Objective:
    """What a trial is scored by, on the validation split over the gamma grid (one noise seed per level)."""

    name: str  # 'auc' | 'ood' | 'id_with_ood_floor'
    gammas: list[float]
    train_gamma: float
    ood_floor: float = 0.0

    def __call__(self, summary: dict[str, Any]) -> float:
        if self.name == "auc":
            return summary["auc"]
        if self.name == "ood":
            return summary["ood_accuracy"]
        # ID accuracy among trials whose OOD accuracy reaches the floor; below it, a value under every feasible one
        ood = summary["ood_accuracy"]
        return summary["id_accuracy"] if ood >= self.ood_floor else ood - 1.0


def validation_summary(trainer, objective: Objective) -> dict[str, Any]:
    """The trainer's model on its eval (validation) split at every gamma of the grid, noise seed 0 (the same noisy
    inputs for every trial), summarised as `eval robustness` does."""
    was_training = trainer.model.training
    levels = [[evaluate_level(trainer, g, seed=0)] for g in objective.gammas]
    trainer.model.train(was_training)
    return summarize(levels, objective.train_gamma)


class _Report(TrainerCallback):
    """At `steps`, scores the model on the validation split, reports it to the trial and stops a hopeless one."""

    def __init__(self, trial, objective: Objective, steps: set[int]) -> None:
        self.trial, self.objective, self.steps = trial, objective, steps
        self.trainer = None
        self.pruned = False

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.steps:
            value = self.objective(validation_summary(self.trainer, self.objective))
            self.trial.report(value, state.global_step)
            if self.trial.should_prune():
                self.pruned = True
                control.should_training_stop = True
        return control


def trial_args(base, arm: Arm, params: dict[str, Any], output_dir: str):
    """The recipe's `ConstrainedConfig` with the trial's values, the arm's constraints, and no checkpoints."""
    return dataclasses.replace(
        base,
        **params,
        constraints=base.constraints if arm.constrained else "none",
        output_dir=output_dir,
        save_strategy="no",
        eval_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )


def train_model(data, arm: Arm, args, pooling: str, callbacks=()) -> ConstrainedTrainer:
    """A trainer for `arm` on `data` (tokenized train / held-out splits, class names, model path and config)."""
    torch.manual_seed(args.seed)  # the new readout's initialisation follows the trial's seed
    model = build_classifier(
        data.path, data.config, data.names, arm.readout, pooling, data.architecture, data.ut_layers, dtype=data.dtype
    )
    trainer = ConstrainedTrainer(
        model=model,
        args=args,
        train_dataset=data.train,
        eval_dataset=data.held_out,
        processing_class=data.tokenizer,
        data_collator=DataCollatorWithPadding(data.tokenizer),
        callbacks=list(callbacks),
    )
    for cb in callbacks:
        cb.trainer = trainer
    return trainer


def run_trial(
    trial, data, arm: Arm, space: SearchSpace, base_args, objective: Objective, settings, pooling: str
) -> float:
    """One trial: the arm trained with the sampled values, scored on the validation split (pruned on the way)."""
    import optuna

    params = space.suggest(trial)
    args = trial_args(base_args, arm, params, os.path.join(settings.sweep_dir, "trials", arm.name, str(trial.number)))
    steps_total = _total_steps(args, len(data.train))
    every = max(1, math.ceil(steps_total / settings.evaluations_per_trial))
    report = _Report(trial, objective, set(range(every, steps_total, every)))
    trainer = train_model(data, arm, args, pooling, [report])
    trainer.train()
    if report.pruned:
        raise optuna.TrialPruned(f"pruned at step {trainer.state.global_step}")
    summary = validation_summary(trainer, objective)
    for key in ("auc", "id_accuracy", "ood_accuracy", "descent_share"):
        trial.set_user_attr(key, summary[key])
    trial.set_user_attr("seconds", trainer.state.log_history[-1].get("train_runtime"))
    return objective(summary)


def _total_steps(args, rows: int) -> int:
    if args.max_steps and args.max_steps > 0:
        return args.max_steps
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
    return max(1, math.ceil(rows / per_step) * math.ceil(args.num_train_epochs))


def open_study(name: str, storage: str, seed: int, pruner: str):
    """The arm's study, created or loaded (so a killed sweep resumes); TPE, median pruning after 2 trials."""
    import optuna

    if storage.startswith("sqlite:///"):
        os.makedirs(os.path.dirname(os.path.abspath(storage[len("sqlite:///") :])), exist_ok=True)
    with warnings.catch_warnings():  # heartbeats are marked experimental; they mark a killed worker's trial failed
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        rdb = optuna.storages.RDBStorage(storage, heartbeat_interval=10, grace_period=30)
    return optuna.create_study(
        study_name=name,
        storage=rdb,
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2) if pruner == "median" else optuna.pruners.NopPruner(),
        direction="maximize",
        load_if_exists=True,
    )


def finished(study) -> int:
    return sum(t.state.name in FINISHED for t in study.get_trials(deepcopy=False))


def search(study, n_trials: int, trial_fn, desc: str) -> None:
    """Runs trials until the study holds `n_trials` finished ones (counting those other workers finished)."""
    import optuna
    from tqdm.auto import tqdm

    done = finished(study)
    if done >= n_trials:
        return
    states = tuple(getattr(optuna.trial.TrialState, s) for s in FINISHED)
    with tqdm(total=n_trials, initial=done, desc=desc, unit="trial") as bar:

        def progress(study, trial):
            bar.n = finished(study)
            bar.refresh()

        study.optimize(
            trial_fn,
            callbacks=[optuna.study.MaxTrialsCallback(n_trials, states=states), progress],
            gc_after_trial=True,
        )


def best_params(study) -> dict[str, Any]:
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if not complete:
        raise RuntimeError(f"Study {study.study_name!r} has no complete trial: every trial failed or was pruned.")
    return dict(max(complete, key=lambda t: t.value).params)
