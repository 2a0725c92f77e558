"""
A registry of variants by name, shared by every place that chooses a class by a name a user gives: the training
modes and dual optimizers (`constraints/`), the sweep objectives (`sweep/`) and the judges (`evaluation/alpaca/`).
Each registers its classes with `@REGISTRY.register`; a class that cannot be one (not a subclass of the base, an
attribute or abstract method missing, a name taken, a name that is no printable identifier) is refused when it
registers, in one line. A registry is read like a mapping and changed only through `register` and `unregister`: the
dict API's writes (`MODES["x"] = cls`, `update`, `del`) would pass none of these checks, so it has none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
C = TypeVar("C")  # the class being registered (a subclass of the registry's base)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a variant's name: a printable identifier a user can type


class Registry(Mapping[str, type[T]], Generic[T]):
    """
    Variants by name (`cls.name`), in the order they were registered: what a config field chooses from. A registry
    knows its `kind` (words for messages), the `base` class its variants extend (an ABC: what a variant must
    implement is abstract there) and the class attributes each must define (`needs`): a class lacking one is refused
    when it registers, naming the attribute, so no variant fails after training. A name already taken is refused
    too, unless the registration says it replaces it (`register(cls, replace=True)`).
    """

    def __init__(self, kind: str, base: type, needs: tuple[str, ...] = ("name",)):  # `base`: T, an abstract class
        self._variants: dict[str, type[T]] = {}
        self.kind, self.base, self.needs = kind, base, needs

    def __getitem__(self, name: str) -> type[T]:
        return self._variants[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._variants)

    def __len__(self) -> int:
        return len(self._variants)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._variants)})"

    @overload
    def register(self, cls: C, *, replace: bool = False) -> C: ...
    @overload
    def register(self, cls: None = None, *, replace: bool = False) -> Callable[[C], C]: ...
    def register(self, cls: Any = None, *, replace: bool = False) -> Any:
        """Register `cls` under its `name` (a class decorator: `@REGISTRY.register`, or
        `@REGISTRY.register(replace=True)` to replace a variant of that name on purpose), after `check`."""
        if cls is None:
            return lambda later: self.register(later, replace=replace)
        self._variants[self.check(cls, replace)] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Remove the variant `name` (a plug-in's, or a test's); refused naming the registered ones if there is none."""
        if name not in self._variants:
            raise VariantError(f"no {self.kind} {name!r} is registered; registered: {', '.join(self._variants)}.")
        del self._variants[name]

    def check(self, cls: Any, replace: bool = False) -> str:
        """The name `cls` registers under; refuses (`VariantError`, one line naming the class and what is missing or
        taken) a class that cannot be a variant of this registry."""
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
        name = getattr(cls, "name", None)  # None where `needs` leaves `name` out: refused here, not an AttributeError
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise VariantError(
                f"{what} cannot be registered as a {self.kind}: its `name` must be a printable identifier (letters, "
                f"digits, '_', '.', '-'; at most 64 characters, starting with a letter or digit), got {name!r}."
            )
        taken = self.get(name)
        same = taken is not None and (taken.__module__, taken.__qualname__) == (cls.__module__, cls.__qualname__)
        if taken is not None and not replace and not same:  # the same class defined again (a reload) is no clash
            raise VariantError(
                f"{what} cannot be registered as {self.kind} {name!r}: the name is taken by {taken.__module__}."
                f"{taken.__qualname__}; choose another name, or replace it on purpose with `register(replace=True)`."
            )
        return name


class VariantError(ValueError):
    """A class that cannot be registered as a variant; the message names it and what it lacks or takes."""
