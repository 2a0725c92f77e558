"""
A user's file as their type checker reads it, checked by `make lint` (mypy, so CI): the configs' fields, the
variants' included, are static, typed and complete in an editor. Every `# type: ignore[code]` below marks a line that
must stay an error: with `warn_unused_ignores` on for this file, the check fails the day one of them type-checks.
Never run, only checked (`tests/test_config_types.py` holds the same file to it once more, with mypy run on a copy).
"""

from typing import Literal, assert_type

from constrained_sft import ConstrainedConfig, ConstrainedSFTConfig
from constrained_sft.study.plan import StudyPlan
from constrained_sft.tasks import AnyRecipe, Task
from constrained_sft.tasks.sft import SFTRecipe


def a_users_config() -> None:
    args = ConstrainedSFTConfig(output_dir="o", descent_alpah=0.05)  # type: ignore[call-arg]
    assert_type(args.nupi_kp, float)
    assert_type(args.alm_penalty, float | None)
    assert_type(args.penalty_weight, float)
    assert_type(args.console_format, Literal["compact", "full"])
    assert_type(args.early_exit_scale, Literal["uniform", "linear", "sum", "sqrt", "inv", "inv_sqrt"])
    assert_type(args.max_length, int | None)  # TRL's own fields, as before
    args.nupi_kpp  # type: ignore[attr-defined]  # noqa: B018 (an attribute read, a misspelt one)
    args.console_format = "verbose"  # type: ignore[assignment]
    ConstrainedConfig(output_dir="o", penalty_wieght=2.0)  # type: ignore[call-arg]


def a_users_recipe(recipe: SFTRecipe) -> None:
    assert_type(recipe.training, ConstrainedSFTConfig)
    assert_type(recipe.training.dual_lr, float)
    recipe.training.dual_lrr  # type: ignore[attr-defined]  # noqa: B018


def at_the_study_level(recipe: AnyRecipe, plan: StudyPlan, task: Task) -> None:
    """Above the tasks (the study, the sweep, the comparison floor) a recipe of any task is typed too: the fields every
    task's trainer config has, and a field of one task's config only once narrowed to it (a study's are SFT's)."""
    assert_type(recipe.training.nupi_kp, float)
    assert_type(recipe.training.noise_gamma, float | list[float] | str)
    recipe.training.nupi_kpp  # type: ignore[union-attr]  # noqa: B018 (misspelt above the tasks)
    recipe.training.max_length  # type: ignore[union-attr]  # noqa: B018 (SFT's only: not every task's)
    assert_type(plan.constrained.training.max_length, int | None)
    plan.constrained.training.dual_lrr  # type: ignore[attr-defined]  # noqa: B018
    task.training.train(recipe)  # a task's roles take the recipes it parsed
