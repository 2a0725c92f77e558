"""A dataclass field's value against its annotation: the first check of every config and argument class."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from .types import JSONRead, Kwargs


def check_fields(instance: Any, owner: type | tuple[type, ...] | None = None) -> None:
    """
    Refuse, naming the field, a value of the wrong kind in a dataclass field: the field's annotation is the contract
    (`int` is an integer and not a bool, `float` a finite number, `str` a string among the field's `choices` if it
    has them, a `Literal` one of its values, `list[X]` a list of X, `X | None` also None, a union any of its members; a field whose default is None
    may stay None: a command that requires it says so). Fields declared by `owner`
    (default: the instance's class and its bases) are checked; `Any`, dicts and other types are left to the field's
    own validation. Called first in `__post_init__`, so a value of the wrong kind never reaches a range check or a
    library call that would fail with a message naming no field.
    """
    classes = owner if isinstance(owner, tuple) else (owner or type(instance),)
    for cls in classes:
        hints = typing.get_type_hints(cls)
        own = cls.__dict__.get("__annotations__", {}) if owner is not None else hints
        for field in dataclasses.fields(cls):
            if field.name not in own or field.name not in hints:
                continue
            value = getattr(instance, field.name)
            if value is None and field.default is None:  # a field the command requires: it says so itself
                continue
            if not matches_type(value, hints[field.name]):
                kind = "" if typing.get_origin(hints[field.name]) is typing.Literal else f" ({type(value).__name__})"
                raise ValueError(f"`{field.name}` must be {describe_type(hints[field.name])}, got {value!r}{kind}.")
            choices = field.metadata.get("choices")
            if choices and isinstance(value, str) and value not in choices:
                raise ValueError(f"`{field.name}` must be one of {list(choices)}, got {value!r}.")


def matches_type(value: Any, hint: Any) -> bool:
    """Whether `value` is of the kind the annotation `hint` allows (the rules of `check_fields`)."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(matches_type(value, member) for member in typing.get_args(hint))
    if origin in (list, tuple):
        (item, *_) = typing.get_args(hint) or (Any,)
        return isinstance(value, (list, tuple)) and all(matches_type(v, item) for v in value)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    return True  # Any, dicts, enums: the field's own validation decides


def describe_type(hint: Any) -> str:
    """The annotation `hint` in words, for a refusal ("a finite number or None", "one of ['a', 'b']")."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return f"one of {list(typing.get_args(hint))}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_type(member) for member in typing.get_args(hint))
    if origin in (list, tuple):
        (item, *_) = typing.get_args(hint) or (Any,)
        return f"a list of {describe_type(item).removeprefix('a ').removeprefix('an ')}s"
    names = {type(None): "None", bool: "a boolean (true / false)", int: "an integer", float: "a finite number"}
    return names.get(hint, "a string" if hint is str else getattr(hint, "__name__", str(hint)))


def known_keys(cls: type, data: Mapping[str, Any], what: str) -> JSONRead:
    """`data` as a dict once every key names a field of the dataclass `cls`: a saved result read back with a key this
    version does not know is an error naming it (`what`), not a number silently dropped. The values are returned as
    `Any`: they are what a JSON file held, and it is `cls(**...)` that gives them their fields' types."""
    names = {f.name for f in dataclasses.fields(cls)}
    if unknown := sorted(set(data) - names):
        raise ValueError(f"{what}: unknown key(s) {unknown}; known: {sorted(names)}")
    return dict(data)


def mapping_field(value: object, name: str) -> Kwargs:
    """A keyword-arguments field (`model_init_kwargs`, `dataset_kwargs`): unset is {}; `TrainingArguments` has read
    a JSON string into a dict by the time it is used, so anything else is an error naming the field."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"`{name}` must be a mapping of keyword arguments, got {value!r}.")
    return value
