"""
A registry of variants by name, shared by every place that chooses a class by a name a user gives: the training
modes and dual optimizers (`constraints/`), the sweep objectives (`sweep/`) and the judges (`evaluation/alpaca/`).
Each registers its classes with `@REGISTRY.register`; a class that cannot be one (not a subclass of the base, an
attribute or abstract method missing, a name taken) is refused when it registers, in one line.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


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
        self[self.check(cls, replace)] = cls
        return cls

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
        return name


class VariantError(ValueError):
    """A class that cannot be registered as a variant; the message names it and what it lacks or takes."""
