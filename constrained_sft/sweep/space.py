"""
The search space of a sweep, read from a small YAML file with one section per arm:

    constrained:                                  # the constrained arms (one per readout)
      dual_lr: {low: 0.01, high: 2.0, log: true}  # a float range, log-uniform
      descent_alpha: {low: 0.0, high: 0.2}        # uniform
      seed: {choices: [0, 1, 2, 3, 4]}            # categorical
      num_train_epochs: {low: 1, high: 3, int: true}
    erm:                                          # the ERM baseline: its own knobs only
      learning_rate: {low: 1.0e-5, high: 1.0e-4, log: true}
      seed: {choices: [0, 1, 2, 3, 4]}

Every name is a field of the recipe's trainer config (`ConstrainedSFTConfig` for SFT recipes, `ConstrainedConfig`
otherwise); an ERM section may not search constraint or dual fields (ERM has none to tune). Every bound and choice is
checked against the field's own validation (`check_ranges`) before the first trial: `descent_alpha` up to 1.5 is
refused, naming the entry, with nothing written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from ..comparison import names as arm_names
from ..config import ConstrainedConfig, ConstraintArguments, unread_fields
from ..constraints import ERM, mode_of
from ..utils.files import read_yaml
from ..utils.types import Kwargs

if TYPE_CHECKING:
    from optuna import Trial

    from ..tasks import AnyTraining, Arm

SECTIONS = arm_names.TWINS  # a search space's sections: the arms' names
KEYS = ("low", "high", "log", "int", "choices")
# one trial's searched values: config field -> value (Optuna's kinds: a float, an int or a choice)
ParamValue: TypeAlias = "float | int | str | bool | None"
Params: TypeAlias = "dict[str, ParamValue]"
DEFAULT_ERM = {"learning_rate": {"low": 1.0e-5, "high": 1.0e-4, "log": True}, "seed": {"choices": [0, 1, 2, 3, 4]}}


class SearchSpaceError(ValueError):
    """A search-space file or entry that cannot be searched; the message names the entry and what is allowed."""


@dataclass(frozen=True)
class Param:
    name: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    int: bool = False
    choices: tuple[ParamValue, ...] | None = None

    def suggest(self, trial: Trial) -> ParamValue:
        if self.choices is not None:
            choice: ParamValue = trial.suggest_categorical(self.name, list(self.choices))
            return choice
        low, high = self.low, self.high
        if low is None or high is None:  # a Param made by hand; _param gives every range both ends
            raise SearchSpaceError(f"search space `{self.name}`: give `choices`, or `low` and `high`.")
        if self.int:
            return int(trial.suggest_int(self.name, int(low), int(high), log=self.log))
        return float(trial.suggest_float(self.name, float(low), float(high), log=self.log))


def _param(section: str, name: str, spec: Any, config_class: type) -> Param:
    where = f"search space `{section}.{name}`"
    if name not in {f.name for f in dataclasses.fields(config_class)}:
        raise SearchSpaceError(
            f"{where}: not a field of {config_class.__name__} (e.g. dual_lr, descent_alpha, learning_rate, seed)."
        )
    if section == arm_names.ERM and name in {f.name for f in dataclasses.fields(ConstraintArguments)}:
        raise SearchSpaceError(f"{where}: ERM has no constraints; search it only in the `constrained` section.")
    if not isinstance(spec, dict) or set(spec) - set(KEYS):
        raise SearchSpaceError(f"{where}: a mapping with keys {list(KEYS)}, got {spec!r}.")
    if "choices" in spec:
        if set(spec) != {"choices"} or not isinstance(spec["choices"], list) or not spec["choices"]:
            raise SearchSpaceError(f"{where}: `choices` must be a non-empty list and stand alone, got {spec!r}.")
        return Param(name, choices=tuple(spec["choices"]))
    try:
        low, high = float(spec["low"]), float(spec["high"])
    except (KeyError, TypeError, ValueError):
        raise SearchSpaceError(f"{where}: needs numeric `low` and `high` (or `choices`), got {spec!r}.") from None
    log, is_int = bool(spec.get("log", False)), bool(spec.get("int", False))
    if not low < high:
        raise SearchSpaceError(f"{where}: `low` must be < `high`, got {low} and {high}.")
    if log and low <= 0:
        raise SearchSpaceError(f"{where}: a log-scale range needs `low` > 0, got {low}.")
    return Param(name, low, high, log, is_int)


@dataclass(frozen=True)
class SearchSpace:
    params: tuple[Param, ...]

    def suggest(self, trial: Trial) -> Params:
        return {p.name: p.suggest(trial) for p in self.params}

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def check(self, base: AnyTraining, section: str) -> None:
        """Every bound (or choice) set on the recipe's config `base` must pass that config's own validation."""
        for p in self.params:
            values = p.choices if p.choices is not None else (p.low, p.high)
            for value in values:
                value = int(value) if p.int and p.choices is None and value is not None else value
                change: Kwargs = {p.name: value}  # a field named by the space file, of the field's own type
                try:
                    dataclasses.replace(base, **change)
                except (ValueError, TypeError) as error:
                    raise SearchSpaceError(
                        f"search space `{section}.{p.name}`: {value!r} is outside what the field allows: {error}"
                    ) from None


def parse_space(
    raw: Any, source: str = "search space", config_class: type = ConstrainedConfig, sections: tuple[str, ...] = ()
) -> dict[str, SearchSpace]:
    """{'constrained': SearchSpace, 'erm': SearchSpace} from the YAML mapping (ERM defaults to `DEFAULT_ERM`), plus
    a space for each of the optional `sections` (the sweep's `--arm` names) the mapping has."""
    allowed = [*SECTIONS, *sections]
    if not isinstance(raw, dict) or not raw or set(raw) - set(allowed):
        raise SearchSpaceError(f"{source}: a mapping with sections {allowed}, got {raw!r:.200}.")
    out = {}
    for section in [*SECTIONS, *(s for s in sections if s in raw)]:
        entries = raw.get(section, DEFAULT_ERM if section == arm_names.ERM else None)
        if not isinstance(entries, dict) or not entries:
            raise SearchSpaceError(f"{source}: section `{section}` must map field names to ranges, got {entries!r}.")
        out[section] = SearchSpace(tuple(_param(section, k, v, config_class) for k, v in entries.items()))
    return out


def arm_space(
    spaces: dict[str, SearchSpace], name: str, fallback: str, unread: dict[str, str]
) -> tuple[SearchSpace, list[str]]:
    """(the space arm `name` searches, the fallback's entries it leaves out): its own section, where an entry the arm
    does not read (`unread`: {field: why}, `config.unread_fields`) is refused; else the `fallback` section
    (`constrained` / `erm`) without such entries, which the sweep reports as not searched."""
    if name in spaces:
        for p in spaces[name].params:
            if p.name in unread:
                raise SearchSpaceError(
                    f"search space `{name}.{p.name}`: the `{name}` arm never reads `{p.name}` ({unread[p.name]}); "
                    "search only the fields it trains with."
                )
        return spaces[name], []
    kept = tuple(p for p in spaces[fallback].params if p.name not in unread)
    if not kept:
        raise SearchSpaceError(
            f"search space: the `{name}` arm has no section of its own and reads none of the `{fallback}` section's "
            f"fields ({', '.join(spaces[fallback].names)}); add a `{name}` section."
        )
    return SearchSpace(kept), [p.name for p in spaces[fallback].params if p.name in unread]


def check_ranges(spaces: dict[str, SearchSpace], base: AnyTraining) -> None:
    """Refuse, before any trial, a bound or choice the recipe's config (`base`) would refuse in a trial."""
    for section, space in spaces.items():
        space.check(base, section)


def arm_spaces(
    spaces: dict[str, SearchSpace], arms: Sequence[Arm], training: AnyTraining
) -> tuple[dict[str, SearchSpace], dict[str, list[str]]]:
    """({arm: the space it searches}, {arm: fallback entries it leaves out}) for the sweep's `arms` (`tasks.Arm`; an
    arm without its own trainer config trains the recipe's `training`, as ERM when not constrained): every entry the
    arm reads, each bound and choice checked against the arm's own config before any trial."""
    searched: dict[str, SearchSpace] = {}
    dropped: dict[str, list[str]] = {}
    for arm in arms:
        config = arm.training or training
        constraints = config.constraints if arm.constrained or arm.training else ERM
        unread = unread_fields(constraints, config.dual_optimizer)
        fallback = arm_names.readout_arm(mode_of(constraints).trains_layers, None)
        searched[arm.name], dropped[arm.name] = arm_space(spaces, arm.name, fallback, unread)
        check_ranges({arm.name if arm.name in spaces else fallback: searched[arm.name]}, config)
    return searched, dropped


def load_space(
    path: str, config_class: type = ConstrainedConfig, sections: tuple[str, ...] = ()
) -> dict[str, SearchSpace]:
    try:
        raw = read_yaml(path, "--space")
    except OSError as e:
        raise SearchSpaceError(f"`--space` {path!r} cannot be read: {e.strerror}.") from None
    except ValueError as e:  # a syntax error or a key given twice, with its line and column
        raise SearchSpaceError(str(e)) from None
    if isinstance(raw, dict) and raw and any(not isinstance(v, dict) for v in raw.values()):
        raise SearchSpaceError(
            f"`--space` {path} is a recipe (field names and values, what `train --config` reads), not a search space; "
            "give sections of field ranges such as `constrained: {dual_lr: {low: 0.01, high: 1, log: true}}` "
            "(`constrained-sft recipes` lists the shipped spaces)."
        )
    return parse_space(raw, f"search space {path}", config_class, sections)
