"""The configs' variant fields are static (a type checker and an editor see them), each declared once; a plug-in's
typed settings class is checked when its variant is defined; a user's misspelt field fails a type check."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from conftest import hang_limit

from constrained_sft import ConstrainedConfig, ConstrainedSFTConfig
from constrained_sft.config.variant_fields import STATIC_FIELDS, VariantArguments, all_settings
from constrained_sft.constraints import BY_FIELD, settings_of
from constrained_sft.constraints.objectives import EARLY_EXIT_SCALES, EarlyExitScale

ROOT = Path(__file__).resolve().parents[1]


def builtin_settings():
    """The settings of this library's own variants: every one is a static field (a plug-in's goes in
    `plugin_settings`)."""
    from constrained_sft.config.variant_fields import PICKERS

    return {
        setting.field: setting
        for picker, registry in PICKERS.items()
        for variant in registry.values()
        if variant.__module__.startswith("constrained_sft.")
        for setting in variant.settings.values()
    }


def test_each_builtin_setting_is_declared_once_its_type_and_default_by_its_field():
    """The variants' `Setting`s leave type and default to the configs' static fields (`BY_FIELD`): nothing is declared
    twice, so nothing is held equal; the field's help and choices are the setting's (its metadata)."""
    settings = builtin_settings()
    assert set(settings) == STATIC_FIELDS and len(settings) == 9
    hints = typing.get_type_hints(VariantArguments)
    for f in dataclasses.fields(VariantArguments):
        if f.name == "plugin_settings":
            continue
        setting = settings[f.name]
        assert setting.type is BY_FIELD and setting.default is BY_FIELD, f.name
        assert f.metadata == setting.metadata, f.name
        if setting.choices is not None:  # a closed choice: its type is the Literal of the setting's choices
            assert typing.get_args(hints[f.name]) == setting.choices, f.name
    assert typing.get_args(EarlyExitScale) == tuple(EARLY_EXIT_SCALES)
    assert {s.field for _, _, s in all_settings()} >= set(settings)


def test_a_typed_settings_class_that_cannot_declare_settings_is_refused_naming_the_field():
    @dataclasses.dataclass
    class NoDefault:
        rate: float = dataclasses.field(metadata={"help": "a rate"})

    @dataclasses.dataclass
    class NoHelp:
        rate: float = 0.5

    @dataclasses.dataclass
    class Choice:
        kind: typing.Literal["a", "b"] = dataclasses.field(default="a", metadata={"help": "which"})

    with pytest.raises(TypeError, match=r"NoDefault: field `rate` needs a default"):
        settings_of(NoDefault)
    with pytest.raises(TypeError, match=r"NoHelp: field `rate` needs `metadata=\{'help': ...\}`"):
        settings_of(NoHelp)
    with pytest.raises(TypeError, match=r"must be a dataclass"):
        settings_of(int)
    kind = settings_of(Choice)["kind"]
    assert (kind.field, kind.type, kind.default, kind.choices) == ("kind", str, "a", ("a", "b"))


def test_both_configs_carry_every_variant_field_with_its_type():
    for config in (ConstrainedSFTConfig, ConstrainedConfig):
        hints = typing.get_type_hints(config)
        assert all(hints[name] == typing.get_type_hints(VariantArguments)[name] for name in STATIC_FIELDS)
        assert typing.get_origin(hints["console_format"]) is typing.Literal


@pytest.mark.slow  # mypy reads transformers, TRL and torch: about a minute cold (`make lint` checks the same in CI)
def test_a_misspelt_field_fails_a_type_check_of_user_code(tmp_path):
    """mypy on a user's file, without the `# type: ignore`s of tests/type_checks: each misspelling is an error naming
    the field, and the fields' types are the declared ones."""
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    assert mypy, "mypy is a dev dependency"
    text = (ROOT / "tests" / "type_checks" / "typed_user_config.py").read_text()
    user = tmp_path / "user_train.py"
    user.write_text(text.replace("# type: ignore", "# was ignored") + "\nreveal_type(ConstrainedSFTConfig.nupi_ema)\n")
    done = subprocess.run(
        [mypy, "--no-error-summary", "--cache-dir", str(ROOT / ".mypy_cache"), str(user)],
        capture_output=True, text=True, cwd=ROOT, timeout=hang_limit(600),
    )  # fmt: skip
    found = [line.split(": ", 1)[1] for line in done.stdout.splitlines() if line.startswith(str(user))]
    assert any('Unexpected keyword argument "descent_alpah"' in line and "descent_alpha" in line for line in found)
    assert any('Unexpected keyword argument "penalty_wieght"' in line for line in found)
    assert (
        len([line for line in found if 'has no attribute "nupi_kpp"' in line]) == 3
    )  # a task's; any task's (2 items)
    assert len([line for line in found if 'has no attribute "dual_lrr"' in line]) == 2  # a task's recipe, a study's
    one_task_only = '"ConstrainedConfig" of "ConstrainedSFTConfig | ConstrainedConfig" has no attribute "max_length"'
    assert any(one_task_only in line for line in found)  # SFT's field, read from any task's recipe
    assert any("Incompatible types in assignment" in line and "'verbose'" in line for line in found)
    assert 'note: Revealed type is "builtins.float"' in found or 'note: Revealed type is "float"' in found, found
    assert len([line for line in found if line.startswith("error")]) == 10, found


def test_the_closed_choices_that_name_an_arm_name_it_as_the_comparison_floor_does():
    from constrained_sft.comparison.names import ERM
    from constrained_sft.sweep.arguments import BASELINES

    assert BASELINES == ("none", ERM)
