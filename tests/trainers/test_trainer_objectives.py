"""The penalty and early-exit objectives through the trainers: at weight 0 they are ERM bit for bit, otherwise the
loss is f_L plus their term, and a run resumes bit-exact."""

import json

import pytest
import torch
from conftest import duals, full_and_resumed


def _weights(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()]


@pytest.mark.parametrize("mode", [dict(constraints="penalty", penalty_weight=0.0),
                                  dict(constraints="early_exit", early_exit_weight=0.0)])  # fmt: skip
def test_weight_zero_trains_exactly_as_erm(make_trainer, tmp_path, mode):
    """Same seed, same token samples: adding a zero-weight term changes no bit of the trained model."""
    erm = make_trainer(constraints="none", max_steps=3, layer_loss_tokens=2, output_dir=str(tmp_path / "erm"))
    erm.train()
    other = make_trainer(**mode, max_steps=3, layer_loss_tokens=2, output_dir=str(tmp_path / "other"))
    other.train()
    assert all(torch.equal(a, b) for a, b in zip(_weights(erm), _weights(other), strict=True))


def test_early_exit_loss_is_f_L_plus_the_weighted_layers(make_trainer):
    trainer = make_trainer(constraints="early_exit", early_exit_scale="linear", early_exit_weight=0.5, max_steps=3,
                           layer_loss_tokens=None)  # fmt: skip
    trainer.train()
    weights = trainer.primal_dual.objective.weights  # layers 1..4 of 4: 0.5 x l / 4 below L
    assert weights == pytest.approx([0.125, 0.25, 0.375, 0.0])
    rows = [r for r in trainer.state.log_history if "loss" in r and "layer_loss/4" in r]
    assert len(rows) == 3
    for r in rows:  # every token read: the logged layer losses are the ones in the objective
        expected = r["layer_loss/4"] + sum(
            w * r[f"layer_loss/{layer}"] for layer, w in zip((1, 2, 3), weights[:3], strict=True)
        )
        assert r["loss"] == pytest.approx(expected, rel=1e-4)
        assert not any(k.startswith("dual/") for k in r)  # no multipliers in this objective


def test_penalty_holds_the_multipliers_and_reports_measured_constraints(make_trainer, tmp_path):
    trainer = make_trainer(constraints="penalty", penalty_weight=0.3, dual_lr=1.0, max_steps=3)
    trainer.train()
    assert all(v == 0.3 for step in duals(trainer.state.log_history).values() for v in step.values())
    report = json.loads((tmp_path / "out" / "constraints.json").read_text())
    assert report["objective"] == "lagrangian" and report["dual_optimizer"] == "fixed" and report["constraints"]
    assert set(report["dual"].values()) == {0.3}


@pytest.mark.parametrize("mode", [dict(constraints="penalty", penalty_weight=0.3),
                                  dict(constraints="early_exit", early_exit_scale="sqrt")])  # fmt: skip
def test_resumes_bit_exact(make_trainer, tmp_path, mode):
    kw = dict(**mode, max_steps=4, save_strategy="steps", save_steps=2, layer_loss_tokens=2, noise_gamma=[0.0, 1.0])
    full, resumed = full_and_resumed(make_trainer, tmp_path, 2, **kw)
    assert all(torch.equal(a, b) for a, b in zip(_weights(full), _weights(resumed), strict=True))
