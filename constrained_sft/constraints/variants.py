"""
Variants and their registries: each dual optimizer and each training mode is a class registered by name
(`Registry.register`, a decorator on the class) that declares the config fields it reads (`Setting`), with their type,
default, help and the values they take. The trainer configs build their fields from these declarations and validate
through them (`config.variant_fields`), so a new dual optimizer or mode is one class in one file: no list of names,
no field or check to add elsewhere. A subclass that is not registered (one's own, passed to `PrimalDual` directly)
changes no registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

T = TypeVar("T")
# a variant's settings as its `__init__` takes them: keyword argument -> the value of the config field carrying it
SettingValues: TypeAlias = "dict[str, float | int | bool | str | None]"


def is_number(value: object) -> bool:
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


class Registry(dict):
    """
    Variants by name (`cls.name`), in the order they were registered: what a config field chooses from. A registry
    knows its `kind` (words for messages), the `base` class its variants extend (an ABC: what a variant must
    implement is abstract there) and the class attributes each must define (`needs`): a class lacking one is refused
    when it registers, naming the attribute, so no variant fails after training. A name already taken is refused
    too, unless the registration says it replaces it (`register(cls, replace=True)`).
    """

    def __init__(self, kind: str, base: type, needs: tuple[str, ...] = ("name",)):
        super().__init__()
        self.kind, self.base, self.needs = kind, base, needs

    def register(self, cls: type[T] | None = None, *, replace: bool = False):
        """Register `cls` under its `name` (a class decorator: `@REGISTRY.register`, or
        `@REGISTRY.register(replace=True)` to replace a variant of that name on purpose), after `check`."""
        if cls is None:
            return lambda later: self.register(later, replace=replace)
        self.check(cls, replace)
        self[cls.name] = cls
        return cls

    def check(self, cls: Any, replace: bool = False) -> None:
        """Refuse (`VariantError`, one line naming the class and what is missing or taken) a class that cannot be a
        variant of this registry."""
        what = getattr(cls, "__qualname__", repr(cls))
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise VariantError(
                f"{what} cannot be registered as a {self.kind}: it must be a subclass of {self.base.__name__}."
            )
        missing = [name for name in self.needs if not hasattr(cls, name)]
        missing += sorted(getattr(cls, "__abstractmethods__", ()))
        if missing:
            raise VariantError(
                f"{what} cannot be registered as a {self.kind}: it does not define {', '.join(f'`{m}`' for m in missing)}"
                f", which every {self.kind} defines (see {self.base.__name__})."
            )
        name = cls.name
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise VariantError(
                f"{what} cannot be registered as a {self.kind}: its `name` must be a word, got {name!r}."
            )
        taken = self.get(name)
        same = taken is not None and (taken.__module__, taken.__qualname__) == (cls.__module__, cls.__qualname__)
        if taken is not None and not replace and not same:  # the same class defined again (a reload) is no clash
            raise VariantError(
                f"{what} cannot be registered as {self.kind} {name!r}: the name is taken by {taken.__module__}."
                f"{taken.__qualname__}; choose another name, or replace it on purpose with `register(replace=True)`."
            )


class VariantError(ValueError):
    """A class that cannot be registered as a variant; the message names it and what it lacks or takes."""
