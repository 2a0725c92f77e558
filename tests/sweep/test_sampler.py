"""The sweep's sampler (`sweep.sampler.TrialSeededTPE`): workers sharing one study never draw the same point, and a
rerun of the same search draws the same points (trial n seeded from the sweep's seed and n)."""

import optuna
import pytest

from constrained_sft.sweep.sampler import TrialSeededTPE, trial_seed


def objective(trial) -> float:
    x = trial.suggest_float("x", 0.01, 1.0, log=True)
    y = trial.suggest_float("y", 0.0, 0.2)
    return (x - 0.3) ** 2 + y


def interleaved(workers: int, per_worker: int, seed: int = 0, startup: int = 4) -> list[dict]:
    """`workers` studies on one storage, as workers on other machines hold them, each asking in turn and telling
    after all have asked (every worker samples while the others' trials run); the params in trial order."""
    storage = optuna.storages.InMemoryStorage()
    studies = [
        optuna.create_study(
            study_name="s", storage=storage, sampler=TrialSeededTPE(seed, startup), load_if_exists=True
        )
        for _ in range(workers)
    ]
    for _ in range(per_worker):
        asked = [study.ask() for study in studies]
        for study, trial in zip(studies, asked, strict=True):
            study.tell(trial, objective(trial))
    return [t.params for t in studies[0].get_trials(deepcopy=False)]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_workers_sharing_a_study_never_draw_the_same_point(workers):
    points = interleaved(workers, 6)  # past TPE's startup trials: the model-based proposals too
    assert len(points) == 6 * workers
    assert len({tuple(sorted(p.items())) for p in points}) == len(points)


def test_the_same_seed_draws_the_same_search_and_another_seed_another():
    assert interleaved(2, 6) == interleaved(2, 6)
    assert interleaved(2, 6, seed=1) != interleaved(2, 6)


def test_one_seed_per_process_drew_alike_which_is_what_this_mends():
    """Optuna's own TPE, one instance per worker with the same seed: the workers' first points coincide."""
    storage = optuna.storages.InMemoryStorage()
    studies = [
        optuna.create_study(study_name="s", storage=storage, sampler=optuna.samplers.TPESampler(seed=0),
                            load_if_exists=True)
        for _ in range(2)
    ]  # fmt: skip
    first = [study.ask() for study in studies]
    assert first[0].suggest_float("x", 0.01, 1.0) == first[1].suggest_float("x", 0.01, 1.0)


def test_trial_seeds_are_distinct_and_32_bit():
    seeds = {trial_seed(s, n) for s in range(4) for n in range(500)}
    assert len(seeds) == 2000 and all(0 <= s < 2**32 for s in seeds)
