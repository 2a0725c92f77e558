"""
The readout contract: any `nn.Module` whose forward returns loss, predictions and per-layer outputs, with a shared
readout and a per-example loss, trains under the constraints; a transformers regression head too.
"""

import math

import pytest
import torch
from datasets import Dataset
from torch import nn

from constrained_sft import ConstrainedConfig, ConstrainedTrainer
from constrained_sft.readout import FunctionLoss, ReadoutError, ReadoutLoss, cross_entropy, readout_loss, squared_error
from constrained_sft.testing import tiny_encoder


class TinyRegressor(nn.Module):
    """A user's own model: 4 residual blocks on 3 features, one linear readout shared by every block's output."""

    def __init__(self, d: int = 16, layers: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(3, d)
        self.blocks = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.head = nn.Linear(d, 1)

    def readout(self, h, attention_mask=None):  # psi: [B, d] -> [B]
        return self.head(h).squeeze(-1)

    def forward(self, x, labels=None, output_hidden_states=False):
        h = torch.relu(self.inp(x))
        states = [h]
        for block in self.blocks:
            h = h + torch.relu(block(h))
            states.append(h)
        pred = self.readout(h)
        loss = None if labels is None else ((pred - labels) ** 2).mean()
        return {"loss": loss, "logits": pred, "hidden_states": tuple(states) if output_hidden_states else None}


def regression_data(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = x[:, 0] * x[:, 1] + torch.sin(x[:, 2])
    return Dataset.from_dict({"x": x.tolist(), "labels": y.tolist()})


def args(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path), report_to="none", use_cpu=True, save_strategy="no", per_device_train_batch_size=32,
        learning_rate=1e-2, logging_steps=1, max_steps=20, disable_tqdm=True, dual_lr=0.5, descent_alpha=0.1,
        seed=0,
    )  # fmt: skip
    return ConstrainedConfig(**{**base, **kw})


def test_per_example_losses():
    logits, labels = torch.tensor([[2.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 0])
    torch.testing.assert_close(cross_entropy(logits, labels), -torch.log_softmax(logits, -1)[:, 0])
    pred, target = torch.tensor([[1.0, 2.0], [0.0, 0.0]]), torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert squared_error(pred, target).tolist() == [2.0, 1.0]  # mean over everything but the batch
    assert squared_error(torch.tensor([[3.0], [1.0]]), torch.tensor([1.0, 1.0])).tolist() == [4.0, 0.0]
    with pytest.raises(ReadoutError, match="one shape"):
        squared_error(torch.zeros(2, 3), torch.zeros(2, 4))


def test_a_users_own_regression_module_trains_under_the_constraints(tmp_path):
    trainer = ConstrainedTrainer(
        model=TinyRegressor(), args=args(tmp_path), train_dataset=regression_data(), loss="squared_error", num_layers=4
    )
    trainer.train()
    assert trainer.readout_loss.name == "squared_error" and trainer.primal_dual.spec.layers == (1, 2, 3, 4)
    rows = [r for r in trainer.state.log_history if "layer_loss/4" in r]
    assert rows[-1]["layer_loss/4"] < rows[0]["layer_loss/4"]  # it learned
    assert all(math.isfinite(rows[-1][f"slack/{k}"]) for k in (2, 3, 4))
    assert max(trainer.primal_dual.multipliers.value()) > 0  # the constraints acted
    assert "accuracy" not in rows[-1]  # no accuracy for a regression


def test_the_last_layer_of_the_contract_is_the_models_own_loss(tmp_path):
    """f_L through the readout equals the model's own mean squared error on the same batch."""
    model = TinyRegressor().eval()
    trainer = ConstrainedTrainer(model=model, args=args(tmp_path), loss="squared_error", num_layers=4)
    batch = regression_data(8).with_format("torch")[:]
    out = model(batch["x"], batch["labels"], output_hidden_states=True)
    losses = trainer._layer_losses(out, batch["labels"], None)
    assert losses.sums[-1] / losses.num_tokens == pytest.approx(out["loss"].item(), rel=1e-6)


def test_a_transformers_regression_head_defaults_to_squared_error(tmp_path):
    model = tiny_encoder(num_labels=1)
    ids = torch.randint(11, 32, (64, 8), generator=torch.Generator().manual_seed(0))
    data = Dataset.from_dict(
        {"input_ids": ids.tolist(), "attention_mask": [[1] * 8] * 64, "labels": (ids.float().mean(1) / 32).tolist()}
    )
    trainer = ConstrainedTrainer(model=model, args=args(tmp_path, max_steps=3, per_device_train_batch_size=16),
                                 train_dataset=data)  # fmt: skip
    assert trainer.readout_loss.name == "squared_error"
    trainer.train()
    assert math.isfinite(trainer.state.log_history[-2]["layer_loss/4"])


def test_a_model_without_a_config_must_name_its_loss_and_depth(tmp_path):
    with pytest.raises(ValueError, match="`loss`"):
        ConstrainedTrainer(model=TinyRegressor(), args=args(tmp_path), num_layers=4)
    with pytest.raises(ValueError, match="`num_layers`"):
        ConstrainedTrainer(model=TinyRegressor(), args=args(tmp_path), loss="squared_error")


def test_a_users_module_checkpoints_and_resumes_exactly(tmp_path):
    """The contract's model keeps the constrained trainer's checkpoints: stop at step 10, resume, same end state."""
    from transformers import TrainerCallback

    full = ConstrainedTrainer(
        model=TinyRegressor(), args=args(tmp_path / "full"), train_dataset=regression_data(),
        loss="squared_error", num_layers=4,
    )  # fmt: skip
    full.train()

    class StopAt10(TrainerCallback):
        def on_step_end(self, a, state, control, **kwargs):
            control.should_training_stop = state.global_step == 10

    kw = dict(train_dataset=regression_data(), loss="squared_error", num_layers=4)
    cut = ConstrainedTrainer(
        model=TinyRegressor(), args=args(tmp_path / "cut", save_strategy="steps", save_steps=10), **kw
    )
    cut.add_callback(StopAt10())
    cut.train()
    resumed = ConstrainedTrainer(
        model=TinyRegressor(), args=args(tmp_path / "cut", save_strategy="steps", save_steps=10), **kw
    )
    resumed.train(resume_from_checkpoint=True)
    assert torch.equal(resumed.primal_dual.multipliers.value(), full.primal_dual.multipliers.value())
    for a, b in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)


class HuberLoss(ReadoutLoss):
    """A loss of one's own that declares its targets (finite, at most 10 in size) and no accuracy."""

    name = "huber"

    def __call__(self, predictions, targets):
        return nn.functional.huber_loss(predictions.float(), targets.float(), reduction="none")

    def target_problem(self, values, num_labels):
        return ~(torch.isfinite(values) & (values.abs() <= 10)).all(-1), "finite numbers of size <= 10"


def test_a_loss_says_what_targets_it_takes_and_whether_accuracy_means_anything(tmp_path, caplog):
    """The trainer asks the loss, never its name: a loss of one's own gets its own target check, and a plain function
    is said (once, at construction) to get neither a check nor an accuracy."""
    trainer = ConstrainedTrainer(model=TinyRegressor(), args=args(tmp_path, max_steps=3), train_dataset=regression_data(),
                                 loss=HuberLoss(), num_layers=4)  # fmt: skip
    trainer.train()
    assert (
        math.isfinite(trainer.state.log_history[-2]["layer_loss/4"])
        and "accuracy" not in trainer.state.log_history[-2]
    )
    far = regression_data().map(lambda row, i: {"labels": 50.0 if i == 7 else row["labels"]}, with_indices=True)
    with pytest.raises(
        ValueError, match=r"`train_dataset` row 7: `labels` \[50.0\] — labels must be finite numbers of size <= 10"
    ):
        ConstrainedTrainer(
            model=TinyRegressor(), args=args(tmp_path), train_dataset=far, loss=HuberLoss(), num_layers=4
        )
    with caplog.at_level("INFO", logger="constrained_sft.trainers.readout"):
        plain = ConstrainedTrainer(model=TinyRegressor(), args=args(tmp_path), train_dataset=far, loss=squared_error,
                                   num_layers=4)  # fmt: skip
    assert isinstance(plain.readout_loss, FunctionLoss) and plain.readout_loss.name == "squared_error"
    assert "its targets are not checked and no accuracy is logged" in caplog.text
    assert readout_loss("cross_entropy").reports_accuracy and not readout_loss("squared_error").reports_accuracy
    with pytest.raises(
        ReadoutError, match=r"`loss` must be one of \['cross_entropy', 'squared_error'\], a ReadoutLoss"
    ):
        readout_loss("hinge")
