"""
A user's file as their type checker reads it, checked by `make lint` (mypy, so CI): the configs' fields, the
variants' included, are static, typed and complete in an editor. Every `# type: ignore[code]` below marks a line that
must stay an error: with `warn_unused_ignores` on for this file, the check fails the day one of them type-checks.
Never run, only checked (`tests/test_config_types.py` holds the same file to it once more, with mypy run on a copy).
"""

from typing import Literal, assert_type

from constrained_sft import ConstrainedConfig, ConstrainedSFTConfig
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
