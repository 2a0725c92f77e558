"""
The fields of the variants: the settings a training mode (`constraints.MODES`) or a dual optimizer
(`constraints.DUAL_OPTIMIZERS`) declares (`constraints.Setting`), validated by the setting itself and refused when set
beside a variant that does not read it.

This library's variants' settings are static fields of `VariantArguments` (a base of `ConstraintArguments`, so of
both trainer configs), so that a type checker and an editor see them: each declared once, its type and default here
(the variant's `Setting` leaves them `BY_FIELD`) and its help and allowed values in the variant's `Setting`, which the
field's metadata is. A variant registered from one's own module is still one class in one file: its settings, best
declared as a typed dataclass (`settings_class`), go in `plugin_settings` ({field: value}; `--plugin_settings
'{"dual_momentum": 0.9}'` on the command line, a mapping in a recipe), validated and refused by the same rules, and
read typed with `typed_settings(config)` (or `Setting.read(config)`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from ..constraints import DUAL_OPTIMIZERS, MODES, Setting
from ..constraints.dual_methods import AugmentedLagrangianDual, NuPIDual
from ..constraints.modes import EarlyExitLoss, Penalty
from ..constraints.objectives import EarlyExitScale
from ..constraints.variants import BY_FIELD
from ..utils.fields import check_fields, describe_type, matches_type
from ..utils.registry import Registry
from ..utils.types import JSONRead

# the config field that picks each registry's variant
PICKERS: dict[str, Registry[Any]] = {"constraints": MODES, "dual_optimizer": DUAL_OPTIMIZERS}


def all_settings() -> list[tuple[str, str, Setting]]:
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
    for picker, name, setting in all_settings():
        readers = out.get(setting.field, (picker, ()))[1]
        out[setting.field] = (picker, (*readers, name))
    return out


@dataclass
class VariantArguments:
    """The fields only one training mode or dual optimizer reads; the help of each is its variant's `Setting`'s."""

    # > constraints: penalty
    penalty_weight: float = field(default=1.0, metadata=Penalty.settings["weight"].metadata)
    # > constraints: early_exit
    early_exit_scale: EarlyExitScale = field(default="uniform", metadata=EarlyExitLoss.settings["scale"].metadata)
    early_exit_weight: float = field(default=1.0, metadata=EarlyExitLoss.settings["weight"].metadata)
    # > dual_optimizer: nupi
    nupi_kp: float = field(default=1.0, metadata=NuPIDual.settings["kp"].metadata)
    nupi_ki: float = field(default=1.0, metadata=NuPIDual.settings["ki"].metadata)
    nupi_ema: float = field(default=0.0, metadata=NuPIDual.settings["ema"].metadata)
    # > dual_optimizer: augmented_lagrangian
    alm_penalty: float | None = field(default=None, metadata=AugmentedLagrangianDual.settings["penalty"].metadata)
    alm_growth: float = field(default=1.0, metadata=AugmentedLagrangianDual.settings["growth"].metadata)
    alm_tolerance: float = field(default=0.0, metadata=AugmentedLagrangianDual.settings["tolerance"].metadata)
    # > variants registered from one's own module
    plugin_settings: JSONRead | str | None = field(
        default=None,
        metadata={
            "help": "The settings of training modes and dual optimizers registered from one's own module (this "
            "library's have fields of their own): a mapping {field: value}, or its JSON on the command line "
            "(`--plugin_settings '{\"dual_momentum\": 0.9}'`). Each is validated by its variant's `Setting` and "
            "refused beside a variant that does not read it."
        },
    )

    def _validate_variant_arguments(self) -> None:
        """Each variant's settings as its `Setting`s allow them, then each variant's own cross-field check."""
        check_fields(self, VariantArguments)
        self.plugin_settings = _plugin_settings(self.plugin_settings)
        for _, _, setting in all_settings():
            problem = setting.problem(setting.read(self))
            if problem:
                raise ValueError(problem)
        for variant in DUAL_OPTIMIZERS.values():
            problem = variant.settings_problem(variant.read_settings(self)) if variant.settings else None
            if problem:
                raise ValueError(problem)


STATIC_FIELDS = frozenset(f.name for f in dataclasses.fields(VariantArguments)) - {"plugin_settings"}
STATIC_DEFAULTS = {f.name: f.default for f in dataclasses.fields(VariantArguments) if f.name in STATIC_FIELDS}


def plugin_settings() -> dict[str, Setting]:
    """{field: setting} of the registered variants' settings without a static field (one's own variants'); a setting
    of those that leaves its type or default to a field (`BY_FIELD`, what this library's own variants do) names a
    field the configs lack: refused in one line naming it."""
    plugged: dict[str, Setting] = {}
    for picker, name, setting in all_settings():
        if setting.field in STATIC_FIELDS:
            continue
        if setting.type is BY_FIELD or setting.default is BY_FIELD:
            raise ValueError(
                f"`{picker}: {name}`'s setting `{setting.field}` is no field of the configs, so it must declare its "
                "type and default (or declare its settings as a `settings_class` dataclass)."
            )
        plugged[setting.field] = setting
    return plugged


def _plugin_settings(value: object) -> JSONRead | None:
    """`plugin_settings` as a dict whose every key is a setting of a registered variant without a field of its own,
    each value of its setting's type; anything else is refused naming the key and what is allowed. Empty is None, the
    default, so a run or study recorded before the field existed has the same settings."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"`plugin_settings` must be a JSON object {{field: value}}, got {value!r}.") from None
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"`plugin_settings` must be a mapping {{field: value}}, got {value!r}.")
    plugged = plugin_settings()
    for key, item in value.items():
        if key in STATIC_FIELDS:
            raise ValueError(f"`plugin_settings` holds `{key}`, a field of its own: give it as `{key}`.")
        if key not in plugged:
            raise ValueError(
                f"`plugin_settings` holds `{key}`, which no registered training mode or dual optimizer reads; "
                f"known: {sorted(plugged)} (a variant's module must be imported before the config is built)."
            )
        if not matches_type(item, plugged[key].type):
            raise ValueError(f"`{key}` must be {describe_type(plugged[key].type)}, got {item!r}.")
    return dict(value)


def setting_default(setting: Setting) -> object:
    """A setting's default: its static field's (this library's variants': `BY_FIELD`), else its own."""
    return STATIC_DEFAULTS[setting.field] if setting.default is BY_FIELD else setting.default


def refuse_unread_fields(config: Any) -> None:
    """A field only some variants read, set (not its default) beside a variant that does not read it, is refused,
    naming the field, its variants and the config's."""
    settings = {s.field: s for _, _, s in all_settings()}
    for name, (picker, variants) in read_only_by().items():
        value, chosen, default = settings[name].read(config), getattr(config, picker), setting_default(settings[name])
        if chosen not in variants and value != default:
            readers = " or ".join(f"`{picker}: {v}`" for v in variants)
            raise ValueError(
                f"`{name}` ({value!r}) is read only by {readers}, and this config has `{picker}: {chosen}`, so it "
                f"would be ignored: remove it (default {default!r}) or set {readers}."
            )
