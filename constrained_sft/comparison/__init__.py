"""
A comparison of arms trained from recipes, the layer `study/` and `sweep/` schedule over: the arms' names
(`names`: the only place 'constrained' and 'erm' are written), the arms from their recipes with the one twin check and
the reference arm (`arms`), `RunKey` (one arm trained with one seed), the comparison folder's checks and marker
(`folder`), the default noise grid (`grid`), the arms' recipes from one command line (`recipes`), and the saved models
an evaluation compares (`arm_arguments`). Every comparison pairs its arms by one rule (`compared_pairs`) against one
default reference (`reference_arm`).

May import: utils, config, constraints, readout, noise, data, models, trainers, tasks; `evaluation`, `sweep`, `study`
and `cli` import it.
"""

from .arm_arguments import ArmArguments, check_model_paths, folder_name
from .arms import (
    RunKey,
    arm_recipes,
    compared_pairs,
    more_differences,
    recipe_identity,
    reference_arm,
    study_arms,
    sweep_arms,
    twin_differences,
)
from .comparison_folder import CheckedFolder, check_comparison_folder, check_same_data
from .grid import comparison_levels
from .names import CONSTRAINED, ERM, TWINS, arm_label, readout_arm

__all__ = [
    "CONSTRAINED",
    "ERM",
    "TWINS",
    "ArmArguments",
    "CheckedFolder",
    "RunKey",
    "arm_label",
    "arm_recipes",
    "check_comparison_folder",
    "check_model_paths",
    "check_same_data",
    "compared_pairs",
    "comparison_levels",
    "folder_name",
    "more_differences",
    "readout_arm",
    "recipe_identity",
    "reference_arm",
    "study_arms",
    "sweep_arms",
    "twin_differences",
]
