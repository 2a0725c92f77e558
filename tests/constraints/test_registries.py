"""Every variant registry (training modes, dual optimizers, judges, sweep objectives) checks a class when it registers:
a name already taken is refused unless the registration says it replaces it, and a class missing what its kind needs
is refused naming the attribute, so no user variant fails after training; a user's variant is a choice at once."""

import json
import os
import subprocess
import sys
from abc import ABC, abstractmethod
from typing import ClassVar

import pytest
from conftest import hang_limit

from constrained_sft.utils.registry import Registry, VariantError


class Kind(ABC):
    name: ClassVar[str]
    help: ClassVar[str]

    @classmethod
    @abstractmethod
    def build(cls):
        """What a thing builds."""


def registry():
    things = Registry("thing", Kind, needs=("name", "help"))

    @things.register
    class Builtin(Kind):
        name, help = "builtin", "the built-in"

        @classmethod
        def build(cls):
            return 1

    return things, Builtin


def test_a_class_missing_what_its_kind_needs_is_refused_naming_it():
    things, _ = registry()

    class NoHelp(Kind):
        name = "nohelp"

        @classmethod
        def build(cls):
            return 2

    class NoBuild(Kind):
        name, help = "nobuild", "x"

    with pytest.raises(VariantError, match=r"NoHelp cannot be registered as a thing: it does not define `help`"):
        things.register(NoHelp)
    with pytest.raises(VariantError, match=r"NoBuild cannot be registered as a thing: it does not define `build`"):
        things.register(NoBuild)
    with pytest.raises(VariantError, match=r"str cannot be registered as a thing: it must be a subclass of Kind"):
        things.register(str)
    blank = type("Blank", (NoHelp,), {"name": " ", "help": "x"})
    with pytest.raises(VariantError, match=r"its `name` must be a printable identifier .*, got ' '"):
        things.register(blank)
    assert list(things) == ["builtin"]
    unnamed = Registry("thing", Kind, needs=("help",))  # `needs` leaving `name` out: still refused in one line
    nameless = type("Nameless", (Kind,), {"help": "x", "build": classmethod(lambda cls: 3)})  # no `name` at all
    with pytest.raises(
        VariantError, match=r"Nameless cannot be registered as a thing: its `name` must be a printable"
    ):
        unnamed.register(nameless)
    named = type("Named", (NoHelp,), {"help": "x"})
    assert unnamed.check(named) == "nohelp" and unnamed.register(named) is named and list(unnamed) == ["nohelp"]


def test_a_taken_name_is_refused_unless_replaced_on_purpose():
    things, builtin = registry()

    class Mine(builtin):
        help = "mine"

    with pytest.raises(VariantError, match=r"Mine cannot be registered as thing 'builtin': the name is taken by "
                                           r"test_registries.registry.<locals>.Builtin; choose another name, or "
                                           r"replace it on purpose with `register\(replace=True\)`"):  # fmt: skip
        things.register(Mine)
    assert things["builtin"] is builtin
    assert things.register(replace=True)(Mine) is Mine and things["builtin"] is Mine


@pytest.mark.parametrize("name", ["builtin\u200b", "x" * 65, "two words", "d\u00e9j\u00e0", "-flag", ""])
def test_a_name_that_is_no_printable_identifier_is_refused(name):
    """A zero-width space made a second 'descent' in every list; a long or spaced name could not be typed back."""
    things, builtin = registry()
    odd = type("Odd", (builtin,), {"name": name})
    with pytest.raises(VariantError, match=r"its `name` must be a printable identifier"):
        things.register(odd)
    assert list(things) == ["builtin"]


def test_a_registry_is_changed_only_through_register_and_unregister():
    """The dict API's writes would pass none of the checks: a registry has none."""
    things, builtin = registry()
    with pytest.raises(TypeError):
        things["x"] = builtin  # type: ignore[index]
    with pytest.raises(TypeError):
        del things["builtin"]  # type: ignore[attr-defined]
    assert not hasattr(things, "update") and not hasattr(things, "setdefault") and not hasattr(things, "pop")
    assert dict(things) == {"builtin": builtin} and things.get("x", None) is None and "builtin" in things
    things.unregister("builtin")
    with pytest.raises(VariantError, match=r"no thing 'builtin' is registered"):
        things.unregister("builtin")


USER_MODULE = """
from constrained_sft.constraints import MODES
from constrained_sft.constraints.modes import Mode


class MyDescent(Mode):
    name = "descent"
    help = card_tag = card_text = "mine"

    @classmethod
    def primal_dual_settings(cls, config, spec, num_layers):
        return {}


MODES.register(MyDescent)
"""

USER_OBJECTIVE = """
import json
from transformers import HfArgumentParser
import constrained_sft.sweep  # the sweep's module first: its choices are the registry, not a copy of it
from constrained_sft.sweep import SWEEP_OBJECTIVES, SweepArguments
from constrained_sft.sweep.objectives import SweepObjective


@SWEEP_OBJECTIVES.register
class WorstLevel(SweepObjective):
    name = "worst_level"
    help = "the headline at the worst level"

    @staticmethod
    def score(summary, ood_floor):
        return min(summary.by_level.values())


(parsed,) = HfArgumentParser(SweepArguments).parse_args_into_dataclasses(
    ["--objective", "worst_level", "--space", "s.yaml", "--stage", "search"]
)
parsed.validate()
print(json.dumps(parsed.objective))
"""


def run_fresh(tmp_path, program: str):
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=hang_limit(15),
                          cwd=tmp_path)  # fmt: skip


def test_a_users_mode_with_a_builtins_name_fails_when_its_module_is_imported(tmp_path):
    """In a fresh interpreter, as a user's module registers (a registration is an import-time side effect)."""
    (tmp_path / "my_modes.py").write_text(USER_MODULE)
    done = run_fresh(tmp_path, "import my_modes")
    assert done.returncode == 1
    assert ("VariantError: MyDescent cannot be registered as training mode 'descent': the name is taken by "
            "constrained_sft.constraints.modes.Descent") in done.stderr  # fmt: skip


def test_a_users_sweep_objective_is_a_choice(tmp_path):
    (tmp_path / "s.yaml").write_text("constrained:\n  dual_lr: {low: 0.01, high: 0.5}\n")
    done = run_fresh(tmp_path, USER_OBJECTIVE)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == "worst_level"
