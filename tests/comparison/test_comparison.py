"""The comparison layer's own rules, without training: the reference arm, the arms' names, one command line's
recipes (`with_config`); the twin check and the folder are exercised through the study and the sweep
(tests/test_study*.py, tests/sweep/)."""

import pytest

from constrained_sft.comparison import (
    CONSTRAINED,
    ERM,
    TWINS,
    ArmArguments,
    arm_label,
    arm_recipes,
    compared_pairs,
    readout_arm,
    reference_arm,
)
from constrained_sft.comparison.recipes import with_config


def test_the_reference_arm():
    names = [CONSTRAINED, ERM, "penalty"]
    assert reference_arm(None, names) == ERM and reference_arm(ERM, names) == ERM  # the study's default is given
    assert reference_arm("penalty", names) == "penalty"
    assert reference_arm(None, ["constrained-head", "neftune"]) == "neftune"  # no ERM: the last arm
    with pytest.raises(ValueError, match=r"`--reference` 'nope' must be one of the arms"):
        reference_arm("nope", names)
    with pytest.raises(ValueError, match="this sweep has no `--arm`"):
        reference_arm(ERM, names, twins_only=True)


def test_every_comparison_pairs_its_arms_by_one_rule():
    """The study, the sweep and the eval commands: every arm but the reference against the reference (ERM where the
    comparison has it, else the last arm), a sweep's constrained readouts against their own ERM twins."""
    study = [CONSTRAINED, ERM, "penalty"]
    assert compared_pairs(study, reference_arm(None, study)) == [(CONSTRAINED, ERM), ("penalty", ERM)]
    assert compared_pairs(study, "penalty") == [(CONSTRAINED, "penalty"), (ERM, "penalty")]
    sweep = ["constrained-head", "erm-head", "constrained-linear", "erm-linear", "penalty"]
    twins = {"constrained-head": "erm-head", "constrained-linear": "erm-linear"}
    assert compared_pairs(sweep, "erm-head", twins) == [
        ("constrained-head", "erm-head"),
        ("constrained-linear", "erm-linear"),
        ("penalty", "erm-head"),
    ]
    models = ArmArguments(models=["runs/tuned", "runs/base"])
    assert models.pairs(list(models.arms())) == [("tuned", "base")]  # no ERM among them: the last is the reference
    named = ArmArguments(arm=["erm=e0,e1", "constrained=c0,c1"])
    assert named.pairs(list(named.arms())) == [(CONSTRAINED, ERM)]  # as the study pairs its twins


def test_the_arms_names():
    assert TWINS == ("constrained", "erm")
    assert readout_arm(True, None) == "constrained" and readout_arm(False, "linear") == "erm-linear"
    assert arm_label(ERM) == "ERM" and arm_label("penalty") == "penalty"


def test_an_arm_takes_a_new_plain_name_and_a_yaml_recipe(tmp_path):
    recipe = tmp_path / "penalty.yaml"
    recipe.write_text("constraints: penalty\n")
    assert arm_recipes([f"penalty={recipe}"]) == {"penalty": str(recipe)}
    for text, error in ((f"erm={recipe}", "a new name"), (f"a/b={recipe}", "plain name"), ("x=missing.yaml", "YAML")):
        with pytest.raises((ValueError, FileNotFoundError), match=error):
            arm_recipes([text])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--config", "a.yaml", "--max_steps", "2"], ["--config", "b.yaml", "--max_steps", "2"]),
        (["--config=a.yaml", "--seed", "1"], ["--config=b.yaml", "--seed", "1"]),
        (["--max_steps", "2"], ["--config", "b.yaml", "--max_steps", "2"]),
    ],
)
def test_every_arm_gets_the_command_lines_overrides(argv, expected):
    assert with_config(argv, "b.yaml") == expected
