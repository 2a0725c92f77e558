"""
Variants' settings: each dual optimizer and each training mode is a class registered by name
(`utils.registry.Registry.register`, a decorator on the class) that declares the config fields it reads (`Setting`),
with their type, default, help and the values they take. The trainer configs build their fields from these declarations and validate
through them (`config.variant_fields`), so a new dual optimizer or mode is one class in one file: no list of names,
no field or check to add elsewhere. A subclass that is not registered (one's own, passed to `PrimalDual` directly)
changes no registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeGuard

# a variant's settings as its `__init__` takes them: keyword argument -> the value of the config field carrying it
SettingValues: TypeAlias = "dict[str, float | int | bool | str | None]"


def is_number(value: object) -> TypeGuard[float]:
    """A real number (int or float), not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_at_least(low: float, strict: bool = False) -> Callable[[Any], bool]:
    """A finite number >= `low` (> `low` with `strict`)."""
    return lambda v: is_number(v) and math.isfinite(v) and (v > low if strict else v >= low)


@dataclass(frozen=True)
class Setting:
    """
    One setting of a variant: `field`, the config field (a recipe key and a flag) that carries it; `type` and
    `default`, its annotation and default; `help`; `valid`, whether a value is allowed, and `requirement`, what it asks
    in words ("must be a finite number >= 0"); `choices`, the allowed strings of a choice. The value of the wrong
    kind is refused before `valid` sees it (the config's `check_fields`).
    """

    field: str
    type: Any
    default: Any
    help: str
    valid: Callable[[Any], bool] = lambda value: True
    requirement: str = ""
    choices: tuple[str, ...] | None = None

    def problem(self, value: Any) -> str | None:
        """The refusal of `value`, naming the field and what is allowed; None when it is allowed."""
        if self.choices is not None and value not in self.choices:
            return f"`{self.field}` must be one of {list(self.choices)}, got {value!r}."
        if not self.valid(value):
            return f"`{self.field}` {self.requirement}, got {value!r}."
        return None
