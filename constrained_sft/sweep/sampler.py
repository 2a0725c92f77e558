"""
The sweep's sampler: Optuna's TPE, with each trial's random draws seeded from the sweep's seed (`--sampler_seed`) and
the trial's number, which the storage hands out (unique across every worker of a study: Optuna numbers trials in
the storage's own transaction). One seed per process would not do: workers started with the same seed draw the same
startup points and, seeing the same finished trials, propose the same next point (two Slurm workers once trained the
same configuration twice), and a resumed sweep would draw its first points again.

So the search is reproducible, whichever worker runs which trial: trial n's draws depend only on the sweep's seed,
n and the trials the study held when it was asked. Trials still running are counted as bad results where TPE looks
(`constant_liar`), so a worker steers away from the points others are training (Optuna's advice for distributed
search). Written by hand: Optuna seeds a sampler once per instance; a sampler per trial, built here from its number,
is the part it does not offer.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.samplers import BaseSampler, TPESampler

from .space import Params

if TYPE_CHECKING:
    from collections.abc import Sequence

    from optuna.distributions import BaseDistribution
    from optuna.study import Study
    from optuna.trial import FrozenTrial, TrialState


def trial_seed(seed: int, number: int) -> int:
    """Trial `number`'s seed from the sweep's `seed`: numpy's `SeedSequence` mixes the pair (so seeds 0 and 1 share
    no streams shifted by one trial), cut to the 32 bits Optuna's samplers take."""
    return int(np.random.SeedSequence([seed, number]).generate_state(1)[0])


class TrialSeededTPE(BaseSampler):
    """TPE whose draws for trial n come from `TPESampler(seed=trial_seed(seed, n), constant_liar=True)` (see the
    module docstring). Every Optuna hook is passed on to the trial's sampler; one is kept at a time (a worker runs
    one trial at a time: `study.optimize` with one job)."""

    def __init__(self, seed: int, n_startup_trials: int = 10) -> None:
        self.seed = seed
        self.n_startup_trials = n_startup_trials
        self._trial: tuple[int, TPESampler] | None = None

    def for_trial(self, number: int) -> TPESampler:
        """Trial `number`'s sampler (made on its first use)."""
        if self._trial is None or self._trial[0] != number:
            with warnings.catch_warnings():  # `constant_liar` is marked experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                sampler = TPESampler(
                    seed=trial_seed(self.seed, number), constant_liar=True, n_startup_trials=self.n_startup_trials
                )
            self._trial = (number, sampler)
        return self._trial[1]

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.for_trial(trial.number).infer_relative_search_space(study, trial)

    def sample_relative(self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> Params:
        return self.for_trial(trial.number).sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self.for_trial(trial.number).sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.for_trial(trial.number).before_trial(study, trial)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        self.for_trial(trial.number).after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        """Nothing: the draws are seeded per trial (Optuna calls this for threads of `optimize(n_jobs > 1)`)."""
