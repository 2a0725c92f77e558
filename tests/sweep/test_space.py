"""Search-space files: what is accepted, what is refused and how, and what a trial gets."""

import dataclasses

import optuna
import pytest

from constrained_sft.sweep import SearchSpaceError, parse_space
from constrained_sft.sweep.space import DEFAULT_ERM

GOOD = {
    "constrained": {
        "dual_lr": {"low": 0.01, "high": 1.0, "log": True},
        "descent_alpha": {"low": 0.0, "high": 0.2},
        "num_train_epochs": {"low": 1, "high": 3, "int": True},
        "seed": {"choices": [0, 1, 2]},
    }
}


def test_parses_and_suggests_within_the_ranges():
    spaces = parse_space(GOOD)
    assert spaces["erm"].names == list(DEFAULT_ERM)  # ERM gets its own knobs by default
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=0))
    for _ in range(5):
        params = spaces["constrained"].suggest(study.ask())
        assert 0.01 <= params["dual_lr"] <= 1.0 and 0 <= params["descent_alpha"] <= 0.2
        assert params["num_train_epochs"] in (1, 2, 3) and params["seed"] in (0, 1, 2)
    dist = study.trials[0].distributions
    assert dist["dual_lr"].log and not dist["descent_alpha"].log


@pytest.mark.parametrize(
    "raw, match",
    [
        (
            {"constrained": {"dual_learning_rate": {"low": 0, "high": 1}}},
            r"constrained\.dual_learning_rate`: not a field",
        ),
        (
            {"constrained": {"dual_lr": {"low": 0.0, "high": 1.0, "log": True}}},
            r"dual_lr`: a log-scale range needs `low` > 0",
        ),
        ({"constrained": {"dual_lr": {"low": 1.0, "high": 0.5}}}, r"`low` must be < `high`"),
        ({"constrained": {"dual_lr": {"low": 0.1}}}, r"needs numeric `low` and `high`"),
        (
            {"constrained": {"dual_lr": {"low": 0.1, "high": 1, "step": 2}}},
            r"keys \['low', 'high', 'log', 'int', 'choices'\]",
        ),
        ({"constrained": {"seed": {"choices": []}}}, r"seed`: `choices` must be a non-empty list"),
        (
            {"constrained": GOOD["constrained"], "erm": {"dual_lr": {"low": 0.1, "high": 1}}},
            r"erm\.dual_lr`: ERM has no constraints",
        ),
        ({"constraint": {}}, r"sections \['constrained', 'erm'\]"),
        ({"erm": {"seed": {"choices": [0]}}}, r"section `constrained` must map field names"),
        ([1, 2], r"sections"),
    ],
)
def test_refuses_with_the_entry_and_the_allowed_values(raw, match):
    with pytest.raises(SearchSpaceError, match=match):
        parse_space(raw)


def test_what_is_read_before_it_has_a_value_is_said_not_a_type_error(tmp_path):
    """A range without its ends (a Param made by hand) and the derived defaults read too early fail naming what is
    missing, not with a TypeError deep in Optuna or a path join (the typed seams of issue 67)."""
    from constrained_sft.sweep import SweepArguments
    from constrained_sft.sweep.space import Param

    trial = optuna.create_study().ask()
    with pytest.raises(SearchSpaceError, match="search space `lr`: give `choices`, or `low` and `high`"):
        Param("lr", low=1e-4).suggest(trial)
    assert Param("lr", low=1e-4, high=1e-3, log=True).suggest(trial) == pytest.approx(trial.params["lr"])
    sweep = SweepArguments(space="space.yaml", stage="search")
    plan = sweep.plan(str(tmp_path / "run"), 0.5)  # a study is asked of the plan, whose storage is always set
    assert plan.storage == f"sqlite:///{tmp_path / 'run-sweep' / 'study.db'}" and plan.study_name == "run-sweep"
    assert plan.sweep_dir == plan.options.sweep_dir == str(tmp_path / "run-sweep")
    assert plan.gammas == plan.options.gammas == [0.0, 0.5, 1.0, 1.5, 2.0]  # 0 to 4x the training level
    assert sweep.sweep_dir is None and sweep.gammas is None  # the caller's options as given
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.sweep_dir = "elsewhere"
