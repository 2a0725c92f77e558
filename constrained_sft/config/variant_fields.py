"""
The fields of the variants, built from their registries: every setting a training mode (`constraints.MODES`) or a
dual optimizer (`constraints.DUAL_OPTIMIZERS`) declares becomes a field of `VariantArguments` (a base of
`ConstraintArguments`, so of both trainer configs), with its type, default and help, validated by the setting itself
and refused when set beside a variant that does not read it. A new variant's settings reach the configs, the command
line, the recipes and the reference pages from its own class.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..constraints import DUAL_OPTIMIZERS, MODES, Setting
from ..utils.fields import check_fields
from ..utils.registry import Registry

# the config field that picks each registry's variant
PICKERS: dict[str, Registry[Any]] = {"constraints": MODES, "dual_optimizer": DUAL_OPTIMIZERS}


def variant_settings() -> list[tuple[str, str, Setting]]:
    """(picker field, variant name, setting) for every setting of every registered variant, in registry order."""
    return [
        (picker, name, setting)
        for picker, registry in PICKERS.items()
        for name, variant in registry.items()
        for setting in variant.settings.values()
    ]


def read_only_by() -> dict[str, tuple[str, tuple[str, ...]]]:
    """{field: (the field that picks the variant, the variants that read it)}: set to anything but its default beside
    another variant, such a field would be ignored, so it is refused (`refuse_unread_fields`)."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for picker, name, setting in variant_settings():
        readers = out.get(setting.field, (picker, ()))[1]
        out[setting.field] = (picker, (*readers, name))
    return out


def _validate_variant_arguments(self) -> None:
    """Each variant's settings as its `Setting`s allow them, then each variant's own cross-field check."""
    check_fields(self, VariantArguments)
    for _, _, setting in variant_settings():
        problem = setting.problem(getattr(self, setting.field))
        if problem:
            raise ValueError(problem)
    for variant in DUAL_OPTIMIZERS.values():
        problem = variant.settings_problem(variant.read_settings(self)) if variant.settings else None
        if problem:
            raise ValueError(problem)


def _field(setting: Setting) -> tuple[str, Any, Any]:
    metadata = {"help": setting.help, **({"choices": list(setting.choices)} if setting.choices else {})}
    return setting.field, setting.type, dataclasses.field(default=setting.default, metadata=metadata)


VariantArguments = dataclasses.make_dataclass(
    "VariantArguments",
    [_field(setting) for _, _, setting in variant_settings()],
    namespace={
        "__doc__": "The fields only one training mode or dual optimizer reads, declared by the variants themselves.",
        "_validate_variant_arguments": _validate_variant_arguments,
    },
)
VariantArguments.__module__ = (
    __name__  # pickled and documented as this module's (make_dataclass takes `module` from 3.12)
)


def refuse_unread_fields(config: Any) -> None:
    """A field only some variants read, set (not its default) beside a variant that does not read it, is refused,
    naming the field, its variants and the config's."""
    defaults = {f.name: f.default for f in dataclasses.fields(VariantArguments)}
    for name, (picker, variants) in read_only_by().items():
        value, chosen = getattr(config, name), getattr(config, picker)
        if chosen not in variants and value != defaults[name]:
            readers = " or ".join(f"`{picker}: {v}`" for v in variants)
            raise ValueError(
                f"`{name}` ({value!r}) is read only by {readers}, and this config has `{picker}: {chosen}`, so it "
                f"would be ignored: remove it (default {defaults[name]!r}) or set {readers}."
            )
