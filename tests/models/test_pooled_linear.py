"""The paper's shared linear readout: the model's own output at the last layer, saved and reloaded, trained."""

import pytest
import torch
import transformers
from datasets import Dataset

from constrained_sft import ConstrainedConfig, ConstrainedTrainer, PooledLinearForSequenceClassification
from constrained_sft.readout import ClassifierReadout
from constrained_sft.testing import tiny_encoder


def encoder_dir(tmp_path, arch="bert"):
    """A tiny pretrained-looking encoder folder (no dropout) to build the readout on."""
    path = tmp_path / arch
    tiny_encoder(arch, layers=3).save_pretrained(path)
    return str(path)


def batch():
    ids = torch.tensor([[2, 11, 12, 13, 0, 0], [2, 14, 15, 16, 17, 18]])
    return {"input_ids": ids, "attention_mask": (ids > 0).long()}


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_last_layer_readout_is_the_model_output_and_round_trips(tmp_path, arch, pooling):
    model = PooledLinearForSequenceClassification.from_encoder(encoder_dir(tmp_path, arch), 3, pooling).eval()
    assert getattr(model.encoder, "pooler", None) is None  # the pretrained pooler is not part of psi
    out = model(**batch(), output_hidden_states=True)
    readout = ClassifierReadout.from_model(model)
    assert readout.takes_mask and len(out.hidden_states) == 4
    torch.testing.assert_close(readout(out.hidden_states[-1], batch()["attention_mask"]), out.logits, rtol=0, atol=0)
    model.save_pretrained(tmp_path / "saved")
    again = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "saved").eval()
    assert type(again) is PooledLinearForSequenceClassification and again.config.pooling == pooling
    torch.testing.assert_close(again(**batch()).logits, out.logits, rtol=0, atol=0)


def test_mean_pooling_ignores_padding(tmp_path):
    model = PooledLinearForSequenceClassification.from_encoder(encoder_dir(tmp_path), 2, "mean").eval()
    h = torch.randn(2, 6, 32)
    mask = batch()["attention_mask"]
    expected = torch.stack([h[0, :4].mean(0), h[1].mean(0)])
    torch.testing.assert_close(model.pool(h, mask), expected)
    h2 = h.clone()
    h2[0, 4:] = 100.0  # padded positions change nothing
    torch.testing.assert_close(model.readout(h2, mask), model.readout(h, mask))


def test_the_new_readout_takes_the_pretrained_encoders_dtype(tmp_path):
    model = PooledLinearForSequenceClassification.from_encoder(encoder_dir(tmp_path), 2, dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_refuses_an_unknown_pooling():
    with pytest.raises(ValueError, match=r"`pooling` must be one of \['cls', 'mean'\]"):
        from constrained_sft.models import PooledLinearConfig

        PooledLinearConfig(pooling="max")


def test_constrained_training_moves_the_shared_readout_and_every_layer_uses_it(tmp_path):
    model = PooledLinearForSequenceClassification.from_encoder(encoder_dir(tmp_path), 2, "cls")
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(48):
        ids = torch.randint(11, 32, (8,), generator=g).tolist()
        if i % 2:
            ids[3] = 10
        rows.append({"input_ids": [2, *ids], "attention_mask": [1] * 9, "labels": i % 2})
    before = model.classifier.weight.detach().clone()
    args = ConstrainedConfig(
        output_dir=str(tmp_path / "out"), max_steps=6, per_device_train_batch_size=8, learning_rate=1e-3,
        use_cpu=True, report_to="none", save_strategy="no", dual_lr=0.5, descent_alpha=0.05, logging_steps=1,
    )  # fmt: skip
    trainer = ConstrainedTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows))
    assert trainer.readout.takes_mask
    trainer.train()
    assert not torch.equal(model.classifier.weight, before)
    logged = [h for h in trainer.state.log_history if "layer_loss/1" in h]
    assert logged and all(f"dual/{layer}" in logged[-1] for layer in (2, 3))
    assert any(logged[-1][f"dual/{layer}"] > 0 for layer in (2, 3))
