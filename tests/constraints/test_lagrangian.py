"""Constraint values, Lagrangian penalty and the primal-dual bookkeeping on hand-made numbers."""

import math

import pytest
import torch
from constraint_reference import constraint_sums, slack

from constrained_sft import DescentConstraints, PrimalDual
from constrained_sft.constraints import LayerLosses, penalty


def _losses(means, tokens=10):
    sums = torch.tensor(means, dtype=torch.float32) * tokens
    per_seq = torch.tensor(means, dtype=torch.float32).unsqueeze(1)
    return LayerLosses(
        sums=sums, per_sequence=per_seq, segment_tokens=torch.tensor([tokens]), num_tokens=torch.tensor(tokens)
    )


def test_slack_and_penalty():
    spec = DescentConstraints(layers=(2, 4, 6), alphas=(0.1, 0.5), epsilon=5.0)
    assert spec.keys == (2, 4, 6)
    sums = torch.tensor([40.0, 30.0, 20.0])  # means 4, 3, 2 over 10 tokens
    values = slack(spec, sums, torch.tensor(10))
    assert values.tolist() == pytest.approx([4 - 5, 3 - 0.9 * 4, 2 - 0.5 * 3])
    lam = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    assert penalty(spec, lam, sums, torch.tensor(10)).item() == pytest.approx(10 * (-1 + 2 * -0.6 + 3 * 0.5))
    assert torch.isnan(slack(spec, torch.zeros(3), torch.tensor(0))).all()


def test_penalty_gradient_flows_to_each_layer():
    spec = DescentConstraints(layers=(1, 2, 3), alphas=(0.2, 0.2))
    sums = torch.tensor([3.0, 2.0, 1.0], requires_grad=True)
    penalty(spec, torch.tensor([1.0, 1.0], dtype=torch.float64), sums, torch.tensor(1)).backward()
    # d/ds1 = -(1-a) lam_2; d/ds2 = lam_2 - (1-a) lam_3; d/ds3 = lam_3
    assert sums.grad.tolist() == pytest.approx([-0.8, 0.2, 1.0])


def test_constraint_sums_without_epsilon_has_one_per_step():
    spec = DescentConstraints(layers=(1, 2), alphas=(0.5,))
    assert constraint_sums(spec, torch.tensor([4.0, 1.0]), torch.tensor(1)).tolist() == [-1.0]


def test_resolve_all_layers_and_errors():
    spec = DescentConstraints.resolve(4, "all", 0.1, None)
    assert spec.layers == (1, 2, 3, 4) and spec.alphas == (0.1, 0.1, 0.1)
    assert DescentConstraints.resolve(4, [2, 4], [0.3], 1.0).keys == (2, 4)
    with pytest.raises(ValueError, match=r"constrained_layers.*\[5\].*1\.\.4"):
        DescentConstraints.resolve(4, [2, 5], 0.1, None)
    with pytest.raises(ValueError, match=r"descent_alpha.*2 values.*3 descent steps"):
        DescentConstraints.resolve(4, "all", [0.1, 0.2], None)
    with pytest.raises(ValueError, match="descent_epsilon"):
        DescentConstraints.resolve(4, [3], 0.1, None)
    assert DescentConstraints.resolve(4, [3], 0.1, 2.0).keys == (3,)
    with pytest.raises(ValueError, match="`constrained_layers` must be 'all' or a list of layer indices, got 'first'"):
        DescentConstraints.resolve(4, "first", 0.1, None)  # the API's own check (the config refuses it first)


def test_primal_dual_step_uses_the_global_batch_and_skips_empty_batches():
    spec = DescentConstraints(layers=(1, 2), alphas=(0.5,))
    pd = PrimalDual(spec, dual_lr=1.0)
    pd.train_stats.add(_losses([4.0, 3.0], tokens=10))  # micro-batch 1: slack 3 - 2 = 1
    pd.train_stats.add(_losses([2.0, 0.0], tokens=30))  # micro-batch 2
    stats = pd.step(0, lambda t: t)
    # token-weighted: f1 = (40 + 60) / 40 = 2.5, f2 = 30 / 40 = 0.75 -> slack 0.75 - 1.25 = -0.5
    assert stats.layer_loss == pytest.approx((2.5, 0.75)) and stats.slack == pytest.approx((-0.5,))
    assert stats.feasible_fraction == 1.0 and pd.multipliers.value().item() == 0.0
    metrics = stats.metrics(spec)  # the public log form: keys lined up with `dual/<l>`
    assert metrics["layer_loss/1"] == pytest.approx(2.5) and metrics["slack/2"] == pytest.approx(-0.5)
    pd.train_stats.add(_losses([4.0, 3.0]))
    pd.step(1, lambda t: t)
    assert pd.multipliers.value().item() == pytest.approx(1.0)
    empty = _losses([0.0, 0.0], tokens=0)
    pd.train_stats.add(empty)
    assert pd.step(2, lambda t: t) is None  # no supervised token: nothing measured
    assert pd.multipliers.value().item() == pytest.approx(1.0)


def test_warmup_and_disabled_never_move_multipliers():
    spec = DescentConstraints(layers=(1, 2), alphas=(0.5,))
    warm = PrimalDual(spec, dual_lr=1.0, warmup_steps=2)
    off = PrimalDual(spec, enabled=False, dual_lr=1.0)
    for step in range(3):
        for pd in (warm, off):
            pd.train_stats.add(_losses([4.0, 3.0]))
            pd.step(step, lambda t: t)
        assert warm.active(step) == (step >= 2)
    assert warm.multipliers.value().item() == pytest.approx(1.0)  # only step 2 ascended
    assert off.multipliers.value().item() == 0.0
    summary = warm.summary()
    assert summary.holds == {"2": False} and not summary.feasible


@pytest.mark.parametrize("epsilon", [None, 5.0])
@pytest.mark.parametrize("layers", [(3,), (1, 2), (2, 4, 6, 8)])
def test_penalty_coefficients_give_the_penalty(layers, epsilon):
    """The linear form the trainer uses (coefficients on the host, once per multiplier update) equals sum lambda g."""
    from constrained_sft.constraints.lagrangian import penalty_coefficients

    torch.manual_seed(len(layers))
    spec = DescentConstraints(layers=layers, alphas=tuple(torch.rand(len(layers) - 1).tolist()), epsilon=epsilon)
    lam = torch.rand(len(spec), dtype=torch.float64) * 3
    sums = torch.rand(len(layers), dtype=torch.float64) * 50
    coefficients = penalty_coefficients(spec, lam)
    linear = (torch.tensor(coefficients[:-1], dtype=torch.float64) * sums).sum() + coefficients[-1] * 10
    definition = (lam * constraint_sums(spec, sums, torch.tensor(10))).sum()  # sum_c lambda_c g_c, in float64
    # both sides in float64 from the same inputs, a few terms each: float64 rounding is ~1e-15 relative
    assert linear.item() == pytest.approx(definition.item(), rel=1e-12, abs=1e-12)
    assert linear.item() == pytest.approx(
        penalty(spec, lam, sums, torch.tensor(10)).item(), rel=1e-6
    )  # penalty() sums in fp32


def test_primal_dual_penalty_follows_every_multiplier_update():
    spec = DescentConstraints(layers=(1, 2, 3), alphas=(0.2, 0.2))
    pd = PrimalDual(spec, dual_lr=1.0)
    losses = _losses([3.0, 2.9, 2.8])
    assert pd.penalty(losses).item() == 0.0  # lambda starts at 0
    for value in ([1.0, 2.0], [0.5, 0.0]):
        pd.multipliers.weight.data.copy_(torch.tensor(value, dtype=torch.float64))  # what a checkpoint load does
        expected = penalty(spec, pd.multipliers.value(), losses.sums, losses.num_tokens)
        assert pd.penalty(losses).item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize("epsilon", [None, 0.7])
def test_host_slack_is_the_tensor_slack_bit_for_bit(epsilon):
    """The once-per-step statistics compute the slack in Python floats: the same float64 arithmetic as `slack`."""
    from constrained_sft.constraints.lagrangian import constraint_values

    g = torch.Generator().manual_seed(3)
    spec = DescentConstraints(layers=(1, 3, 4, 7), alphas=tuple(torch.rand(3, generator=g).tolist()), epsilon=epsilon)
    for tokens in (1, 17, 4096):
        sums = torch.rand(4, generator=g, dtype=torch.float64) * tokens * 5
        expected = slack(spec, sums, torch.tensor(tokens)).tolist()
        assert constraint_values(spec, sums.tolist(), float(tokens)) == expected
    assert all(math.isnan(v) for v in constraint_values(spec, [1.0] * 4, 0.0))
