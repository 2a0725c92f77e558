"""
Variants' settings: each dual optimizer and each training mode is a class registered by name
(`utils.registry.Registry.register`, a decorator on the class) that declares the config fields it reads (`Setting`),
with their type, default, help and the values they take. The trainer configs validate through these declarations
(`config.variant_fields`): this library's variants' settings are static fields of the configs, held equal to the
declarations by a test; a variant registered from one's own module is one class in one file, its settings read from
the configs' `plugin_settings` (`Setting.read`). A subclass that is not registered (one's own, passed to `PrimalDual`
directly) changes no registry.
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

    @property
    def metadata(self) -> dict[str, object]:
        """The `dataclasses.field` metadata of the config field that carries it: its help (and choices)."""
        return {"help": self.help, **({"choices": list(self.choices)} if self.choices else {})}

    def read(self, config: object) -> Any:
        """Its value in `config`: the config's field of that name (every setting of this library's variants has one)
        or, for a variant registered from one's own module, the entry of `plugin_settings` (its default if absent)."""
        if hasattr(config, self.field):
            return getattr(config, self.field)
        return (getattr(config, "plugin_settings", None) or {}).get(self.field, self.default)

    def problem(self, value: Any) -> str | None:
        """The refusal of `value`, naming the field and what is allowed; None when it is allowed."""
        if self.choices is not None and value not in self.choices:
            return f"`{self.field}` must be one of {list(self.choices)}, got {value!r}."
        if not self.valid(value):
            return f"`{self.field}` {self.requirement}, got {value!r}."
        return None
