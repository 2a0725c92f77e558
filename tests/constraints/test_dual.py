"""Multipliers and the dual step, without a Trainer: arithmetic, projection, state (in memory and on disk), and a
convex problem."""

import json
import math
import os

import pytest
import torch

from constrained_sft import AdamDual, DescentConstraints, DualOptimizer, Multipliers, PrimalDual, SGDDual
from constrained_sft.constraints import DUAL_OPTIMIZERS, LayerLosses, dual_optimizer_class
from constrained_sft.trainers.resume.files import load_state, read_state, save_state, to_files


def test_sgd_step_is_projected_ascent_with_resilience():
    lam = Multipliers(3, init=0.5)
    dual = SGDDual(lam, lr=0.1, resilience=0.2)
    assert dual.step(torch.tensor([1.0, -10.0, 0.0], dtype=torch.float64))
    # lambda + lr * (slack - rho * lambda), then max(0, .)
    expected = [0.5 + 0.1 * (1.0 - 0.1), max(0.0, 0.5 + 0.1 * (-10.0 - 0.1)), 0.5 + 0.1 * (0.0 - 0.1)]
    assert lam.value().tolist() == pytest.approx(expected, abs=1e-12)  # float64 on the host: a few exact ops


@pytest.mark.parametrize("resilience", [0.0, 0.3])
def test_sgd_ascent_is_torch_sgd_bit_for_bit(resilience):
    """The SGD dual step writes torch.optim.SGD's update itself (no per-call machinery): it must stay SGD's, exactly."""
    lam = Multipliers(4, init=0.2, upper=1.5)
    dual = SGDDual(lam, lr=0.07, resilience=resilience)
    ref = torch.full((4,), 0.2, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([ref], lr=0.07, maximize=True)
    g = torch.Generator().manual_seed(0)
    seen = torch.zeros(4, dtype=torch.float64)
    for _ in range(50):
        s = torch.randn(4, generator=g, dtype=torch.float64) * 3
        assert dual.step(s)
        ref.grad = torch.add(s, ref.detach(), alpha=-resilience)  # slack - resilience * lambda
        opt.step()
        with torch.no_grad():
            ref.clamp_(min=0.0, max=1.5)
        assert torch.equal(lam.weight.detach(), ref.detach())
        seen = torch.cat([seen, lam.weight.detach()])
    assert (seen == 0).any() and (seen == 1.5).any() and ((seen > 0) & (seen < 1.5)).any()  # floor, cap, interior


def test_dual_max_caps_and_zero_floor():
    lam = Multipliers(2, init=0.0, upper=1.0)
    dual = SGDDual(lam, lr=10.0)
    dual.step(torch.tensor([5.0, -5.0], dtype=torch.float64))
    assert lam.value().tolist() == [1.0, 0.0]


def test_adam_matches_torch_adam_on_the_ascent_direction():
    lam = Multipliers(2, init=0.0)
    dual = AdamDual(lam, lr=0.05, resilience=0.1)
    ref = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([ref], lr=0.05)
    for slack in ([1.0, 0.3], [0.5, -0.2], [0.2, 0.1]):
        s = torch.tensor(slack, dtype=torch.float64)
        dual.step(s)
        ref.grad = -(s - 0.1 * ref.detach())  # ascent = descent on the negative
        opt.step()
        with torch.no_grad():
            ref.clamp_(min=0)
    torch.testing.assert_close(lam.value(), ref.detach())


def test_non_finite_slack_skips_and_keeps_lambda():
    lam = Multipliers(2, init=0.3)
    dual = AdamDual(lam, lr=0.1)
    assert not dual.step(torch.tensor([float("nan"), 1.0], dtype=torch.float64))
    assert not dual.step(torch.tensor([float("inf"), 1.0], dtype=torch.float64))
    assert lam.value().tolist() == [0.3, 0.3]
    assert dual.optimizer.state_dict()["state"] == {}  # Adam's moments untouched too


def test_value_is_a_detached_clone():
    lam = Multipliers(1, init=1.0)
    used = lam.value()
    SGDDual(lam, lr=1.0).step(torch.tensor([1.0], dtype=torch.float64))
    assert used.item() == 1.0 and not used.requires_grad


@pytest.mark.parametrize("kind", sorted(DUAL_OPTIMIZERS))
def test_state_round_trip_without_pickle(tmp_path, kind):
    spec = DescentConstraints(layers=(1, 2, 3), alphas=(0.1, 0.1), epsilon=2.0)
    a = PrimalDual(spec, dual_optimizer=DUAL_OPTIMIZERS[kind], dual_lr=0.1)
    losses = LayerLosses(torch.tensor([3.0, 2.9, 2.0]) * 10, torch.zeros(3, 1), torch.tensor([10]), torch.tensor(10))
    for step in range(3):
        a.train_stats.add(losses)
        a.step(step, lambda t: t)
    save_state(a, str(tmp_path))
    assert read_state(str(tmp_path))[1]["format_version"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["constraint_state.json", "constraint_state.safetensors"]
    b = PrimalDual(spec, dual_optimizer=DUAL_OPTIMIZERS[kind], dual_lr=0.1)
    load_state(b, str(tmp_path))
    torch.testing.assert_close(b.multipliers.value(), a.multipliers.value())
    for pd in (a, b):  # the next step agrees too, so optimizer moments were restored
        pd.train_stats.add(losses)
        pd.step(3, lambda t: t)
    # the same float64 host ops on the same inputs in one process: deterministic by construction
    torch.testing.assert_close(b.multipliers.value(), a.multipliers.value(), rtol=0, atol=1e-12)
    assert list(b.history) == list(a.history)
    other = PrimalDual(DescentConstraints(layers=(1, 3), alphas=(0.1,), epsilon=None))
    with pytest.raises(ValueError, match="constrained_layers"):
        load_state(other, str(tmp_path))


@pytest.mark.parametrize(
    ("rho", "kind", "lr", "steps", "tol"),
    # Adam's normalised steps keep circling the saddle point at a fixed lr, so it gets a looser tolerance
    [(0.0, "sgd", 0.2, 3000, 1e-3), (0.5, "sgd", 0.2, 3000, 1e-3), (0.0, "adam", 0.01, 1000, 1e-2)],
)
def test_primal_dual_converges_to_known_multipliers(rho, kind, lr, steps, tol):
    """
    min_x 1/2 ||x - a||^2  s.t.  x_i <= b_i.  KKT: lambda*_i = max(0, a_i - b_i); with resilience rho the dual
    function gains -rho/2 lambda^2, so lambda*_i = max(0, a_i - b_i) / (1 + rho).
    """
    a = torch.tensor([3.0, 1.0, -2.0], dtype=torch.float64)
    b = torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64)
    lam = Multipliers(3)
    dual = DUAL_OPTIMIZERS[kind](lam, lr=lr, resilience=rho)
    x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    primal = torch.optim.SGD([x], lr=0.2)
    for _ in range(steps):
        lagrangian = 0.5 * (x - a).pow(2).sum() + (lam.value() * (x - b)).sum()
        primal.zero_grad()
        lagrangian.backward()
        primal.step()
        dual.step(x.detach() - b)
    expected = (a - b).clamp(min=0) / (1 + rho)
    torch.testing.assert_close(lam.value(), expected, atol=tol, rtol=0)
    torch.testing.assert_close(x.detach(), torch.minimum(a, b + rho * expected), atol=tol, rtol=0)
    assert not math.isnan(lam.value().sum().item())


def test_explicit_relaxation_steps_settles_at_rho_lambda_and_restarts():
    lam = Multipliers(1, init=0.0)
    dual = SGDDual(lam, lr=0.1, resilience=0.5, explicit_relaxation=True)
    dual.step(torch.tensor([1.0], dtype=torch.float64))
    # lambda <- max(0, 0 + 0.1 (1 - u=0)) = 0.1; u <- 0 + min(1, 0.1) (0.5 x 0.1 - 0) = 0.005
    assert lam.value().item() == pytest.approx(0.1) and dual.relaxation.item() == pytest.approx(0.005)
    for _ in range(3000):  # a constant violation of 1: equilibrium u = slack = 1, lambda = u / rho = 2
        dual.step(torch.tensor([1.0], dtype=torch.float64))
    assert dual.relaxation.item() == pytest.approx(1.0, abs=1e-3) and lam.value().item() == pytest.approx(
        2.0, abs=1e-2
    )
    assert dual.relaxation_values() == pytest.approx([0.5 * lam.value().item()], abs=1e-3)
    dual.reset_relaxation()
    assert dual.relaxation.item() == 0.0 and lam.value().item() > 1.9  # the multiplier is kept
    with pytest.raises(ValueError, match="resilience"):
        SGDDual(Multipliers(1), lr=0.1, resilience=0.0, explicit_relaxation=True)


def test_explicit_relaxation_state_round_trips_and_mismatch_is_refused():
    dual = AdamDual(Multipliers(2), lr=0.1, resilience=0.5, explicit_relaxation=True)
    for _ in range(3):
        dual.step(torch.tensor([1.0, 0.5], dtype=torch.float64))
    state = dual.state_dict()
    again = AdamDual(Multipliers(2), lr=0.1, resilience=0.5, explicit_relaxation=True)
    again.load_state_dict(state)
    assert torch.equal(again.relaxation, dual.relaxation) and torch.equal(
        again.multipliers.weight, dual.multipliers.weight
    )
    plain = AdamDual(Multipliers(2), lr=0.1, resilience=0.5)
    with pytest.raises(ValueError, match="resilience_restarts"):
        plain.load_state_dict(state)


def _stepped(pd: PrimalDual, steps: range) -> PrimalDual:
    losses = LayerLosses(torch.tensor([3.0, 2.9, 2.0]) * 10, torch.zeros(3, 1), torch.tensor([10]), torch.tensor(10))
    for step in steps:
        pd.train_stats.add(losses)
        pd.step(step, lambda t: t)
    return pd


@pytest.mark.parametrize("kind", sorted(DUAL_OPTIMIZERS))
def test_state_dict_round_trips_in_memory_like_a_torch_optimizer(kind):
    """No disk: `state_dict()` holds copies (later steps do not change it), and a fresh object loaded from it takes
    the same next steps, moments included."""
    spec = DescentConstraints(layers=(1, 2, 3), alphas=(0.1, 0.1), epsilon=2.0)
    a = _stepped(PrimalDual(spec, dual_optimizer=DUAL_OPTIMIZERS[kind], dual_lr=0.1), range(3))
    state = a.state_dict()
    frozen = state["dual_optimizer"]["multipliers"].clone()
    b = PrimalDual(spec, dual_optimizer=DUAL_OPTIMIZERS[kind], dual_lr=0.1)
    b.load_state_dict(state)
    _stepped(a, range(3, 5)), _stepped(b, range(3, 5))
    assert torch.equal(state["dual_optimizer"]["multipliers"], frozen)  # a copy, not a view of the live weights
    assert torch.equal(b.multipliers.value(), a.multipliers.value()) and list(b.history) == list(a.history)
    with pytest.raises(ValueError, match="dual_optimizer"):  # another dual optimizer's state is refused
        other = next(cls for name, cls in DUAL_OPTIMIZERS.items() if name != kind)
        PrimalDual(spec, dual_optimizer=other).load_state_dict(state)


def test_a_dual_optimizer_of_ones_own_is_a_subclass():
    """The base class is the extension point: a new update rule is a subclass, nothing else changes."""

    class Frozen(DualOptimizer):
        name = "frozen"

        def make_optimizer(self, weight, lr):
            return torch.optim.SGD([weight], lr=lr, maximize=True)

        def ascend(self, weight, direction):
            pass

    pd = _stepped(PrimalDual(DescentConstraints(layers=(1, 2, 3), alphas=(0.1, 0.1), epsilon=None),
                             dual_optimizer=Frozen, dual_lr=1.0, dual_init=0.25), range(3))  # fmt: skip
    assert pd.multipliers.value().tolist() == [0.25, 0.25] and pd.state_dict()["dual_optimizer"]["kind"] == "frozen"
    assert dual_optimizer_class("adam") is AdamDual
    names = r"\['sgd', 'adam', 'nupi', 'augmented_lagrangian'\]"
    with pytest.raises(ValueError, match=rf"`dual_optimizer` must be one of {names}, got 'rmsprop'"):
        dual_optimizer_class("rmsprop")


def test_a_checkpoint_written_before_state_dict_still_resumes_and_is_written_the_same_way():
    """`v1_state/` was saved by 031f68e (Adam, explicit relaxation, 3 steps), before the state went through
    `state_dict()`: it loads, and writing the loaded state gives the same tensors and JSON (the format is unchanged)."""
    folder = os.path.join(os.path.dirname(__file__), "v1_state")
    spec = DescentConstraints(layers=(1, 2, 3), alphas=(0.1, 0.1), epsilon=2.0)
    pd = PrimalDual(spec, dual_optimizer=AdamDual, dual_lr=0.1, resilience=0.5, explicit_relaxation=True)
    load_state(pd, folder)
    assert pd.multipliers.value().tolist() == pytest.approx([0.29993383368858545, 0.29961631241502146, 0.0], abs=0)
    assert len(pd.history) == 3 and "exp_avg" in pd.dual.optimizer.state_dict()["state"][0]
    tensors, meta = read_state(folder)
    again, again_meta = to_files(pd.state_dict())
    assert sorted(again) == sorted(tensors) and all(torch.equal(again[k], tensors[k]) for k in tensors)
    assert json.loads(json.dumps(again_meta)) == {k: v for k, v in meta.items() if k != "format_version"}


def test_multipliers_round_trip_through_state_dict_without_disk():
    """`Multipliers` is a torch module: its values go out as a copy and come back exactly, in float64."""
    from constrained_sft.constraints import Multipliers

    a = Multipliers(3, init=0.5, upper=2.0)
    a.weight.data.copy_(torch.tensor([0.0, 1.25, 2.0], dtype=torch.float64))
    state = {k: v.clone() for k, v in a.state_dict().items()}
    b = Multipliers(3, upper=2.0)
    b.load_state_dict(state)
    assert torch.equal(b.value(), a.value()) and b.value().dtype == torch.float64 and set(state) == {"weight"}
