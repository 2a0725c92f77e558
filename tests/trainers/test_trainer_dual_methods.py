"""nuPI and the augmented Lagrangian through the trainers: nuPI without its proportional gain is SGD bit for bit, the
augmented term is in the loss, the penalty coefficients are reported, and both resume bit-exact."""

import json

import pytest
import torch
from conftest import duals, full_and_resumed


def _weights(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()]


def test_nupi_without_proportional_gain_trains_exactly_as_sgd(make_trainer, tmp_path):
    kw = dict(max_steps=4, layer_loss_tokens=2, dual_lr=0.3, descent_alpha=0.1, resilience=0.2)
    sgd = make_trainer(dual_optimizer="sgd", **kw, output_dir=str(tmp_path / "sgd"))
    sgd.train()
    nupi = make_trainer(dual_optimizer="nupi", nupi_kp=0.0, nupi_ki=1.0, **kw, output_dir=str(tmp_path / "nupi"))
    nupi.train()
    assert duals(sgd.state.log_history) == duals(nupi.state.log_history)
    assert max(max(step.values()) for step in duals(sgd.state.log_history).values()) > 0  # the duals moved
    assert all(torch.equal(a, b) for a, b in zip(_weights(sgd), _weights(nupi), strict=True))
    # with the proportional gain the trajectory differs: the setting reaches the optimizer
    other = make_trainer(dual_optimizer="nupi", nupi_kp=2.0, **kw, output_dir=str(tmp_path / "kp"))
    other.train()
    assert duals(other.state.log_history) != duals(sgd.state.log_history)


def test_augmented_lagrangian_weighs_the_descent_terms_by_its_effective_multipliers(make_trainer, tmp_path):
    """Every token read, one micro-batch per step: the logged loss is f_L plus sum_c relu(lambda_c + c g_c) g_c at
    the step's own constraint values, with lambda the multipliers before the step's dual update."""
    trainer = make_trainer(dual_optimizer="augmented_lagrangian", alm_penalty=0.5, dual_lr=0.2, max_steps=4,
                           layer_loss_tokens=None, descent_alpha=0.1, descent_epsilon=1.0)  # fmt: skip
    trainer.train()
    rows = [r for r in trainer.state.log_history if "loss" in r and "layer_loss/4" in r]
    assert len(rows) == 4
    lam = [0.0] * 4
    for row in rows:
        f = [row[f"layer_loss/{layer}"] for layer in (1, 2, 3, 4)]
        g = [f[0] - 1.0] + [f[i] - 0.9 * f[i - 1] for i in (1, 2, 3)]
        weights = [max(0.0, lam_c + 0.5 * g_c) for lam_c, g_c in zip(lam, g, strict=True)]
        assert row["loss"] == pytest.approx(f[3] + sum(w * g_c for w, g_c in zip(weights, g, strict=True)), rel=1e-4)
        lam = [row[f"dual/{layer}"] for layer in (1, 2, 3, 4)]
    assert any(lam)  # the multipliers moved: the test checked real weights
    report = json.loads((tmp_path / "out" / "constraints.json").read_text())
    assert report["objective"] == "augmented_lagrangian" and report["dual_optimizer"] == "augmented_lagrangian"


@pytest.mark.parametrize(
    "mode",
    [dict(dual_optimizer="nupi", nupi_kp=1.0, nupi_ema=0.5),
     dict(dual_optimizer="augmented_lagrangian", alm_growth=1.5, resilience=0.1)],
)  # fmt: skip
def test_resumes_bit_exact(make_trainer, tmp_path, mode):
    kw = dict(**mode, max_steps=5, save_strategy="steps", save_steps=2, layer_loss_tokens=2, noise_gamma=[0.0, 1.0],
              dual_lr=0.3, gradient_accumulation_steps=2, per_device_train_batch_size=2)  # fmt: skip
    full, resumed = full_and_resumed(make_trainer, tmp_path, 2, **kw)
    assert duals(full.state.log_history)[5] == duals(resumed.state.log_history)[5]
    assert all(torch.equal(a, b) for a, b in zip(_weights(full), _weights(resumed), strict=True))
    a, b = full.primal_dual.dual.state_dict(), resumed.primal_dual.dual.state_dict()
    assert a["extra"].keys() == b["extra"].keys()
    assert all(torch.equal(a["extra"][k], b["extra"][k]) for k in a["extra"])  # ALM's penalty coefficients
    state = a["optimizer"]["state"]
    assert all(torch.equal(v, b["optimizer"]["state"][0][k]) for k, v in state.get(0, {}).items())  # nuPI's xi
