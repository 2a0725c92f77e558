"""
Variants' settings: each dual optimizer and each training mode is a class registered by name
(`utils.registry.Registry.register`, a decorator on the class) that declares the config fields it reads (`Setting`,
`HasSettings`), with their help and the values they take. The trainer configs validate through these declarations
(`config.variant_fields`): this library's variants' settings are static fields of the configs, which declare their
type and default (`BY_FIELD` here: one declaration each); a variant registered from one's own module is one class in
one file, its settings a typed dataclass (`settings_class`) or `Setting`s with their type and default, read from the
configs' `plugin_settings` (`typed_settings`, `Setting.read`). A subclass that is not registered (one's own, passed to `PrimalDual`
directly) changes no registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias, TypeGuard

# a variant's settings as its `__init__` takes them: keyword argument -> the value of the config field carrying it
SettingValues: TypeAlias = "dict[str, float | int | bool | str | None]"


def is_number(value: object) -> TypeGuard[float]:
    """A real number (int or float), not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_at_least(low: float, strict: bool = False) -> Callable[[Any], bool]:
    """A finite number >= `low` (> `low` with `strict`)."""
    return lambda v: is_number(v) and math.isfinite(v) and (v > low if strict else v >= low)


class ByField:
    """The type or default of a setting whose config field is a static field of the configs (this library's
    variants'): the field declares them, once (`config.variant_fields`); the `Setting` declares what the field
    allows and its help."""

    def __repr__(self) -> str:
        return "BY_FIELD"


BY_FIELD: Any = ByField()


@dataclass(frozen=True)
class Setting:
    """
    One setting of a variant: `field`, the config field (a recipe key and a flag) that carries it; `type` and
    `default`, its annotation and default (`BY_FIELD` for this library's variants: their static config field declares
    both, once); `help`; `valid`, whether a value is allowed, and `requirement`, what it asks in words ("must be a
    finite number >= 0"); `choices`, the allowed strings of a choice. The value of the wrong kind is refused before
    `valid` sees it (the config's `check_fields`).
    """

    field: str
    type: Any = BY_FIELD
    default: Any = BY_FIELD
    help: str = ""
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


def settings_of(settings_class: type) -> dict[str, Setting]:
    """
    The settings a variant declares as a typed dataclass (`HasSettings.settings_class`), keyed by field name (the
    keyword argument of the variant's `__init__`): each field a config field of its name, with its annotation (a
    `Literal` of strings is a choice), its default and the help, `valid` and `requirement` of its metadata. A class
    that cannot declare settings is refused in one line naming it and the field, when the variant is defined.
    """
    import dataclasses
    import typing

    what = getattr(settings_class, "__qualname__", repr(settings_class))
    if not dataclasses.is_dataclass(settings_class):
        raise TypeError(f"`settings_class` {what} must be a dataclass whose fields are the variant's settings.")
    hints = typing.get_type_hints(settings_class)
    out: dict[str, Setting] = {}
    for f in dataclasses.fields(settings_class):
        if f.default is dataclasses.MISSING:  # a setting is a value a recipe may leave out: a scalar default
            raise TypeError(
                f"`settings_class` {what}: field `{f.name}` needs a default (a run that sets none uses it)."
            )
        if not f.metadata.get("help"):
            raise TypeError(
                f"`settings_class` {what}: field `{f.name}` needs `metadata={{'help': ...}}` (its --help)."
            )
        hint = hints[f.name]
        literal = typing.get_origin(hint) is typing.Literal
        out[f.name] = Setting(
            f.name,
            str if literal else hint,
            f.default,
            f.metadata["help"],
            f.metadata.get("valid", lambda value: True),
            f.metadata.get("requirement", ""),
            tuple(typing.get_args(hint)) if literal else None,
        )
    return out


class HasSettings:
    """
    What a variant (a training mode, a dual optimizer) reads from the config. `settings`: keyword argument of its
    `__init__` -> the `Setting` of the config field that carries it. Or, the typed way for a variant of one's own,
    `settings_class`: a dataclass whose fields are the settings (field name = config key = keyword argument; type,
    default, and `metadata={"help": ..., "valid": ..., "requirement": ...}`), from which `settings` is derived when
    the class is defined (refused there if it cannot be) and which `typed_settings` returns filled from a config.
    """

    settings: ClassVar[dict[str, Setting]] = {}
    settings_class: ClassVar[type | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = cls.__dict__.get("settings_class")
        if declared is not None:
            cls.settings = settings_of(declared)

    @classmethod
    def read_settings(cls, config: Any) -> SettingValues:
        """The keyword arguments of `__init__` its settings take from a config's fields."""
        return {key: setting.read(config) for key, setting in cls.settings.items()}

    @classmethod
    def typed_settings(cls, config: Any) -> Any:
        """Its `settings_class` filled from `config` (each value of its field's type: the config validated them)."""
        if cls.settings_class is None:
            raise TypeError(f"{cls.__qualname__} declares no `settings_class`; read `read_settings(config)`.")
        return cls.settings_class(**cls.read_settings(config))
