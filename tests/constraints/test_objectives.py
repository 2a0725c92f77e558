"""The objectives beside the descent problem: early-exit weights by torchtune's rules, fixed multipliers (the
penalty method), and the config fields that pick them."""

import math

import pytest
import torch

from constrained_sft import DescentConstraints, EarlyExit, FixedDual, PrimalDual
from constrained_sft.config import constraint_fields
from constrained_sft.constraints import DUAL_OPTIMIZERS, EARLY_EXIT_SCALES, LayerLosses


def test_early_exit_weights_keep_torchtunes_ratios_to_the_last_layer():
    """torchtune: loss = sum_i s_i f_i / sum(s) (e_scale 1); here f_L + sum_l (s_l / s_L) f_l, the same ratios."""
    layers = [1, 2, 3, 4]
    expected = {
        "uniform": [1, 1, 1],
        "linear": [1 / 4, 2 / 4, 3 / 4],
        "sum": [1 / 10, 3 / 10, 6 / 10],  # running sums 1, 3, 6, 10
        "sqrt": [math.sqrt(x) / 2 for x in (1, 2, 3)],
        "inv": [4 / x for x in (1, 2, 3)],
        "inv_sqrt": [2 / math.sqrt(x) for x in (1, 2, 3)],
    }
    assert set(expected) == set(EARLY_EXIT_SCALES)
    for rule, weights in expected.items():
        got = EarlyExit.from_scale(layers, 4, rule, 0.5).weights
        assert got == pytest.approx([0.5 * w for w in weights] + [0.0]), rule
    assert EarlyExit.from_scale([2, 4], 6, "linear", 1.0).weights == pytest.approx([2 / 6, 4 / 6])  # L unmeasured
    with pytest.raises(ValueError, match="early_exit_scale"):
        EarlyExit.from_scale(layers, 4, "cubic", 1.0)


def _losses(means, tokens=10):
    sums = torch.tensor(means, dtype=torch.float32, requires_grad=True)
    return LayerLosses(
        sums=sums * tokens, per_sequence=torch.tensor(means).unsqueeze(1), segment_tokens=torch.tensor([tokens]),
        num_tokens=torch.tensor(tokens),
    )  # fmt: skip


def test_early_exit_adds_the_weighted_layers_and_never_moves_the_multipliers():
    spec = DescentConstraints(layers=(1, 2, 3), alphas=(0.1, 0.1))
    objective = EarlyExit.from_scale(spec.layers, 3, "linear", 1.0)  # w = 1/3, 2/3, 0
    pd = PrimalDual(spec, dual_optimizer=FixedDual, dual_lr=1.0, objective=objective)
    losses = _losses([3.0, 2.5, 2.0])
    assert pd.penalty(losses).item() == pytest.approx(10 * (3.0 / 3 + 2.5 * 2 / 3))  # token sums, as the loss is
    pd.train_stats.add(losses)
    stats = pd.step(0, lambda t: t)
    assert stats.slack and pd.multipliers.value().tolist() == [0.0, 0.0] and pd.dual_metrics() == {}
    assert pd.summary().objective == "early_exit" and pd.summary().dual_optimizer == "fixed"


def test_fixed_dual_is_the_penalty_method():
    """Multipliers held at their start whatever the slack; the state round-trips like any dual optimizer's."""
    spec = DescentConstraints(layers=(1, 2, 3), alphas=(0.1, 0.1))
    pd = PrimalDual(spec, dual_optimizer=FixedDual, dual_lr=1.0, dual_init=0.7)
    for _ in range(3):
        pd.train_stats.add(_losses([3.0, 3.5, 4.0]))  # every constraint violated
        pd.step(0, lambda t: t)
    assert pd.multipliers.value().tolist() == [0.7, 0.7] and set(pd.dual_metrics()) == {"dual/2", "dual/3"}
    again = PrimalDual(spec, dual_optimizer=FixedDual, dual_init=0.7)
    again.load_state_dict(pd.state_dict())
    assert list(again.history) == list(pd.history) and "fixed" not in DUAL_OPTIMIZERS  # chosen by `constraints`


def test_the_config_names_are_the_libraries_and_bad_values_are_refused(tmp_path):
    from constrained_sft import ConstrainedSFTConfig

    assert constraint_fields.DUAL_OPTIMIZERS is DUAL_OPTIMIZERS  # the registry itself: a later registration counts
    assert tuple(EARLY_EXIT_SCALES) == constraint_fields.EARLY_EXIT_SCALES
    base = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False)
    for bad, match in [
        (dict(constraints="penalty", penalty_weight=-1.0), "`penalty_weight` must be a finite number >= 0"),
        (dict(constraints="early_exit", early_exit_weight=float("nan")), "`early_exit_weight` must be a finite"),
        (dict(constraints="early_exit", early_exit_scale="cubic"), r"`early_exit_scale` must be one of \['uniform'"),
        (dict(constraints="penalty", resilience=0.1), "does not run"),
        (dict(constraints="penalty", penalty_weight=2.0, dual_max=1.0), "`penalty_weight` .* must not exceed"),
    ]:
        with pytest.raises(ValueError, match=match) as error:
            ConstrainedSFTConfig(**base, **bad)
        assert "\n" not in str(error.value)
