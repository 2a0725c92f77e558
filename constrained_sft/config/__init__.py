"""
Configuration: the constraint, noise and run fields, defined once and mixed into both trainer configs
(`ConstrainedSFTConfig` for TRL's `SFTTrainer`, `ConstrainedConfig` for `transformers.Trainer`), each validated in
`__post_init__` before the parent's, naming the field and its allowed values.

May import: `utils`, `constraints` (the variants' registries: their settings are fields), transformers and TRL.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import TrainingArguments
from trl import SFTConfig

from ..constraints.modes import mode_of
from .constraint_fields import (
    CONSOLE_FORMATS,
    CONSTRAINT_MODES,
    DUAL_OPTIMIZERS,
    ConstraintArguments,
    is_number,
    unread_fields,
)
from .noise_fields import NoiseArguments, training_level
from .process_fields import HOST_ALLOCATORS, ProcessArguments
from .run_fields import NONFINITE_POLICIES, RunArguments, clearer_precision_error


def validate_then(config, parent: type[TrainingArguments]) -> None:
    """Both configs' `__post_init__`: this library's fields first (naming the field), then `parent`'s own checks."""
    config._validate_constraint_arguments()
    config._validate_noise_arguments()
    config._validate_run_arguments()
    with clearer_precision_error():
        parent.__post_init__(config)


__all__ = [
    "CONSOLE_FORMATS",
    "CONSTRAINT_MODES",
    "DUAL_OPTIMIZERS",
    "HOST_ALLOCATORS",
    "NONFINITE_POLICIES",
    "ConstrainedConfig",
    "ConstrainedSFTConfig",
    "ConstraintArguments",
    "NoiseArguments",
    "ProcessArguments",
    "RunArguments",
    "is_number",
    "training_level",
    "unread_fields",
]


@dataclass
class ConstrainedSFTConfig(ConstraintArguments, NoiseArguments, RunArguments, SFTConfig):
    r"""
    [`trl.SFTConfig`] plus the fields of [`ConstraintArguments`], [`NoiseArguments`] and [`RunArguments`]; every SFT
    field keeps its meaning.
    """

    def __post_init__(self) -> None:
        validate_then(self, SFTConfig)
        if self.packing and self.packing_strategy == "wrapped" and mode_of(self.constraints).trains_layers:
            raise ValueError(
                f"`packing_strategy` 'wrapped' cuts rows from the stream of documents, ignoring their boundaries: they "
                f"attend to each other and each layer's loss is taken over the mix, which `constraints: "
                f"{self.constraints}` trains on. Give 'bfd' (the default: each document alone) or 'bfd_split', or "
                "`packing: false`."
            )


@dataclass
class ConstrainedConfig(ConstraintArguments, NoiseArguments, RunArguments, TrainingArguments):
    r"""
    [`transformers.TrainingArguments`] plus the same constraint, noise and run fields as `ConstrainedSFTConfig`
    ([`ConstraintArguments`], [`NoiseArguments`], [`RunArguments`]): one definition, two trainers.
    """

    def __post_init__(self) -> None:
        validate_then(self, TrainingArguments)
