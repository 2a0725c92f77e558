"""
The comparison protocol (the paper's Appendix B.3, with intervals), for every task: each arm's best configuration
is retrained with seeds 0..S-1, every retrained model is evaluated on the held-out (test) data by `eval robustness`
(the same noisy inputs for every model), and each constrained arm is compared with its ERM twin by the evaluation's
paired bootstrap over training seeds and held-out units.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..comparison import RunKey
from ..evaluation import RobustnessArguments, RobustnessResults, saved_results
from ..evaluation import run as robustness
from ..tasks import Arm, Task

if TYPE_CHECKING:
    from .arguments import SweepPlan


def run_name(arm: str, seed: int) -> str:
    """A retrained model's name in the test results: '<arm>/seed<s>'."""
    return RunKey(seed, arm).name


def seed_dir(sweep_dir: str, arm: str, seed: int) -> str:
    return RunKey(seed, arm).folder(sweep_dir, "final")


def evaluate_finals(
    task: Task, arms: list[Arm], plan: SweepPlan, train_gamma: float, data_args, pairs
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
