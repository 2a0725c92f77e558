"""
A comparison of arms trained from recipes, the layer `study/` and `sweep/` schedule over: the arms' names
(`names`: the only place 'constrained' and 'erm' are written), the arms from their recipes with the one twin check and
the reference arm (`arms`), `RunKey` (one arm trained with one seed), the comparison folder's checks and marker
(`folder`), the default noise grid (`grid`) and the arms' recipes from one command line (`recipes`).

May import: utils, config, constraints, readout, noise, data, models, trainers, tasks; `evaluation`, `sweep`, `study`
and `cli` import it.
"""

from .arms import (
    RunKey,
    arm_recipes,
    more_differences,
    recipe_identity,
    reference_arm,
    study_arms,
    sweep_arms,
    twin_differences,
)
from .folder import CheckedFolder, check_comparison_folder, check_same_data
from .grid import comparison_levels
from .names import CONSTRAINED, ERM, TWINS, arm_label, readout_arm

__all__ = [
    "CONSTRAINED",
    "ERM",
    "TWINS",
    "CheckedFolder",
    "RunKey",
    "arm_label",
    "arm_recipes",
    "check_comparison_folder",
    "check_same_data",
    "comparison_levels",
    "more_differences",
    "readout_arm",
    "recipe_identity",
    "reference_arm",
    "study_arms",
    "sweep_arms",
    "twin_differences",
]
