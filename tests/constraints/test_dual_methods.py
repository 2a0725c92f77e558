"""nuPI and the augmented Lagrangian: the reductions to SGD, the gradient cooper's formulation defines, convergence to
the KKT multipliers of a toy problem with less overshoot than plain ascent, the penalty coefficient's rule, state."""

import math

import pytest
import torch
from cooper import ConstraintType
from cooper.formulations.utils import compute_primal_quadratic_augmented_contribution

from constrained_sft.constraints import (
    AugmentedLagrangian,
    AugmentedLagrangianDual,
    DescentConstraints,
    EarlyExit,
    LayerLosses,
    Multipliers,
    NuPIDual,
    PrimalDual,
    SGDDual,
)


@pytest.mark.parametrize("resilience", [0.0, 0.3])
def test_nupi_without_proportional_gain_is_sgd_bit_for_bit(resilience):
    generator = torch.Generator().manual_seed(0)
    a, b = Multipliers(4), Multipliers(4)
    nupi, sgd = NuPIDual(a, 0.1, resilience, kp=0.0, ki=1.0), SGDDual(b, 0.1, resilience)
    for _ in range(30):
        slack = torch.randn(4, generator=generator, dtype=torch.float64)
        assert nupi.step(slack) and sgd.step(slack)
        assert torch.equal(a.weight, b.weight)
    assert a.weight.sum() > 0  # the projection let some of them grow: a real trajectory


def test_nupi_gains_reach_cooper_as_the_tensors_it_declares_and_step_as_floats_did():
    """The gains are handed to cooper's nuPI as the tensors its signature declares (a float, which cooper converts
    itself, was what the type checker saw as a mismatch): the same trajectory as cooper's optimizer given floats, bit
    for bit, and its documented first step, SGD with lr * Ki."""
    from cooper.optim import nuPI

    generator = torch.Generator().manual_seed(0)
    lam = Multipliers(3)
    dual = NuPIDual(lam, 0.1, kp=0.5, ki=2.0)
    group = dual.optimizer.param_groups[0]
    assert torch.equal(group["Kp"], torch.tensor(0.5)) and torch.equal(group["Ki"], torch.tensor(2.0))
    reference = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    floats = nuPI([reference], lr=0.1, Kp=0.5, Ki=2.0, maximize=True)
    for step in range(20):
        slack = torch.randn(3, generator=generator, dtype=torch.float64)
        dual.step(slack)
        reference.grad = slack
        floats.step()
        with torch.no_grad():
            reference.clamp_(min=0.0)  # the multipliers' projection
        if step == 0:
            assert torch.equal(lam.weight.detach(), (0.1 * 2.0 * slack).clamp(min=0.0))
        assert torch.equal(lam.weight.detach(), reference.detach())


def _toy(dual_class, lr=0.5, rho=0.0, steps=3000, **settings):
    """min_x 1/2 ||x - a||^2 s.t. x <= b (lambda* = max(0, a - b) / (1 + rho)): the final multipliers, the largest
    value the first one reached and the total variation of its trajectory."""
    a = torch.tensor([3.0, 1.0, -2.0], dtype=torch.float64)
    b = torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64)
    lam = Multipliers(3)
    dual = dual_class(lam, lr=lr, resilience=rho, **settings)
    x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    primal = torch.optim.SGD([x], lr=0.2)
    first = []
    for _ in range(steps):
        g = x - b
        weights = lam.value()
        if isinstance(dual, AugmentedLagrangianDual):  # the gradient weight of cooper's quadratic term
            weights = torch.relu(weights + dual.penalty * (g.detach() - rho * weights))
        primal.zero_grad()
        (0.5 * (x - a).pow(2).sum() + (weights * g).sum()).backward()
        primal.step()
        dual.step(x.detach() - b)
        first.append(lam.value()[0].item())
    total_variation = sum(abs(q - p) for p, q in zip(first, first[1:], strict=False))
    return lam.value(), (a - b).clamp(min=0) / (1 + rho), max(first), total_variation


@pytest.mark.parametrize(
    ("dual_class", "settings"),
    [(NuPIDual, {"kp": 1.0}), (NuPIDual, {"kp": 5.0, "ema": 0.5}), (AugmentedLagrangianDual, {})],
)
@pytest.mark.parametrize("rho", [0.0, 0.5])
def test_settles_at_the_kkt_multipliers_with_less_overshoot_than_sgd(dual_class, settings, rho):
    final, expected, peak, variation = _toy(dual_class, rho=rho, **settings)
    torch.testing.assert_close(final, expected, atol=1e-6, rtol=0)
    _, _, sgd_peak, sgd_variation = _toy(SGDDual, rho=rho)
    assert sgd_peak > expected[0] + 0.1  # plain ascent overshoots on this problem at this step size
    assert peak < sgd_peak and variation < sgd_variation


def test_the_augmented_term_has_the_gradient_of_coopers_formulation():
    """d/d(layer sums) of the micro-batch term equals that of N x cooper's quadratic-augmented contribution at the
    micro-batch's constraint values (relaxed by resilience * lambda), violated and satisfied constraints alike."""
    spec = DescentConstraints(layers=(1, 2, 3), alphas=(0.1, 0.2), epsilon=2.5)
    dual = AugmentedLagrangianDual(Multipliers(3), lr=0.1, resilience=0.2, penalty=0.7)
    dual.multipliers.weight.data = torch.tensor([0.4, 0.0, 1.3], dtype=torch.float64)
    tokens = torch.tensor(12.0)
    sums = (torch.tensor([2.0, 2.4, 1.2]) * tokens).requires_grad_()
    losses = LayerLosses(sums, torch.zeros(3, 1), torch.tensor([12]), tokens)
    (grad,) = torch.autograd.grad(AugmentedLagrangian().penalty(spec, dual, losses), sums)

    reference = sums.detach().double().requires_grad_()
    means = reference / tokens.double()
    g = torch.stack([means[0] - 2.5, means[1] - 0.9 * means[0], means[2] - 0.8 * means[1]])
    lam = dual.multipliers.weight.detach()
    violation = g - 0.2 * lam
    assert (violation > 0).any() and (violation < 0).any()  # both branches of the relu
    value = compute_primal_quadratic_augmented_contribution(
        lam, torch.full((3,), 0.7, dtype=torch.float64), violation, ConstraintType.INEQUALITY
    )
    (expected,) = torch.autograd.grad(tokens.double() * value, reference)
    torch.testing.assert_close(grad.double(), expected, atol=1e-6, rtol=1e-5)


def test_the_penalty_coefficient_grows_while_violated_and_restarts_when_met():
    dual = AugmentedLagrangianDual(Multipliers(2), lr=0.1, growth=2.0, tolerance=0.5)
    assert dual.penalty.tolist() == [0.1, 0.1]  # default: the dual learning rate
    dual.step(torch.tensor([1.0, 0.2], dtype=torch.float64))  # above the tolerance / within it
    assert dual.penalty.tolist() == pytest.approx([0.2, 0.1], abs=0)
    dual.step(torch.tensor([1.0, 0.3], dtype=torch.float64))
    assert dual.penalty.tolist() == pytest.approx([0.4, 0.1], abs=0)
    dual.step(torch.tensor([-1.0, 0.3], dtype=torch.float64))  # the first constraint holds: back to its start
    assert dual.penalty.tolist() == pytest.approx([0.1, 0.1], abs=0)
    assert not dual.step(torch.tensor([math.nan, 1.0], dtype=torch.float64))  # non-finite: nothing moves
    assert dual.penalty.tolist() == pytest.approx([0.1, 0.1], abs=0)


@pytest.mark.parametrize(
    ("cls", "settings", "message"),
    [
        (NuPIDual, {"kp": 0.0, "ki": 0.0}, "kp \\+ ki > 0"),
        (NuPIDual, {"ema": 1.0}, "0 <= ema < 1"),
        (AugmentedLagrangianDual, {"growth": 0.5}, "growth >= 1"),
        (AugmentedLagrangianDual, {"penalty": 0.0}, "penalty coefficient > 0"),
    ],
)
def test_bad_settings_are_refused(cls, settings, message):
    with pytest.raises(ValueError, match=message):
        cls(Multipliers(2), 0.1, **settings)


def test_the_augmented_lagrangian_brings_its_objective_and_refuses_another():
    spec = DescentConstraints(layers=(1, 2, 3), alphas=(0.1, 0.1), epsilon=None)
    pd = PrimalDual(spec, dual_optimizer=AugmentedLagrangianDual, dual_lr=0.1, dual_settings={"penalty": 0.3})
    assert isinstance(pd.objective, AugmentedLagrangian) and pd.dual.penalty.tolist() == [0.3, 0.3]
    with pytest.raises(ValueError, match="needs the objective AugmentedLagrangian, got EarlyExit"):
        PrimalDual(spec, dual_optimizer=AugmentedLagrangianDual, objective=EarlyExit([0.0, 0.0, 0.0]))
