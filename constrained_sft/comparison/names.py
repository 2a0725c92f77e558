"""The arms' names: the two every comparison is built around, and how an arm is named and shown. The only place the
names are written (`tests/test_house.py` finds no other string of them in the package)."""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

CONSTRAINED: Final = "constrained"  # the constrained recipe (`--config`)
ErmName: TypeAlias = Literal["erm"]  # the twin's name as a type (a sweep's `baseline` choices)
ERM: Final[ErmName] = "erm"  # its ERM twin (`--erm_config`, a sweep's `baseline: erm`), the default reference arm
TWINS: Final = (CONSTRAINED, ERM)  # names an `--arm` may not take


def readout_arm(constrained: bool, readout: str | None) -> str:
    """A sweep arm's name: 'constrained' or 'erm', with its readout where the task has several ('erm-linear')."""
    name = CONSTRAINED if constrained else ERM
    return f"{name}-{readout}" if readout else name


def clash(name: str, taken: list[str] | tuple[str, ...]) -> str | None:
    """The name of `taken` that `name` would be read as (the same regardless of case: 'ERM' beside the twin 'erm' is
    shown as the twin, and names a folder a case-insensitive file system takes for the twin's), None where none."""
    return next((t for t in taken if t.casefold() == name.casefold()), None)


def arm_label(name: str) -> str:
    """How reports show an arm: 'ERM' for the twin, every other by its name."""
    return "ERM" if name == ERM else name
