"""The unrolled transformer: shapes, tied attention, Xavier, masks, save / load, its readout, constrained training."""

import math

import torch
import transformers

from constrained_sft import ConstrainedConfig, ConstrainedTrainer
from constrained_sft.models import UTConfig, UTForSequenceClassification
from constrained_sft.readout import ClassifierReadout
from constrained_sft.testing import presence_dataset, tiny_encoder, tiny_tokenizer

D, L = 16, 3


def tiny_ut(**kw):
    torch.manual_seed(0)
    return UTForSequenceClassification(UTConfig(vocab_size=32, hidden_size=D, num_hidden_layers=L, num_labels=2, **kw))


def batch():
    ids = torch.tensor([[2, 11, 12, 13, 0, 0], [2, 14, 15, 16, 17, 18]])
    return {"input_ids": ids, "attention_mask": (ids > 0).long()}


def test_shapes_and_the_tied_attention():
    model = tiny_ut().eval()
    out = model(**batch(), output_hidden_states=True)
    assert out.logits.shape == (2, 2) and len(out.hidden_states) == L + 1  # X_0 .. X_L
    assert all(h.shape == (2, 6, D) for h in out.hidden_states)
    # one Q, K, V for the stack, W_l and U_l per layer, no biases but the readout's: V D + 3 D^2 + L 2 D^2 + (D + 1) C
    assert sum(p.numel() for p in model.parameters()) == 32 * D + 3 * D * D + L * 2 * D * D + (D + 1) * 2
    names = [n for n, _ in model.named_parameters() if ".attention." in n]
    assert sorted(names) == ["ut.attention.k.weight", "ut.attention.q.weight", "ut.attention.v.weight"]
    with torch.no_grad():  # the shared attention really is shared: changing it changes every layer after X_0
        model.ut.attention.v.weight.mul_(2)
    again = model(**batch(), output_hidden_states=True)
    assert torch.equal(again.hidden_states[0], out.hidden_states[0])
    assert all(not torch.allclose(a, b) for a, b in zip(again.hidden_states[1:], out.hidden_states[1:], strict=True))


def test_each_layer_is_relu_of_w_z_plus_u_x():
    model = tiny_ut().eval()
    b = batch()
    hidden = model(**b, output_hidden_states=True).hidden_states
    mask = b["attention_mask"].bool()
    attn = model.ut.attention
    for layer, x, out in zip(model.ut.layers, hidden[:-1], hidden[1:], strict=True):
        scores = (x @ attn.q.weight.T) @ (x @ attn.k.weight.T).transpose(1, 2) / math.sqrt(D)
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
        z = scores.softmax(-1) @ (x @ attn.v.weight.T)
        torch.testing.assert_close(out, torch.relu(z @ layer.w.weight.T + x @ layer.u.weight.T))


def test_xavier_initialisation():
    model = tiny_ut()
    bound = math.sqrt(6 / (2 * D))  # Xavier uniform for a square D x D matrix
    for name, p in model.named_parameters():
        if p.dim() == 2 and "embeddings" not in name and "classifier" not in name:
            assert p.abs().max() <= bound and p.std() > bound / 3, name
    assert torch.equal(model.classifier.bias, torch.zeros(2))
    assert torch.equal(model.ut.embeddings.weight[0], torch.zeros(D))  # the padding row


def test_padding_changes_nothing():
    model = tiny_ut().eval()
    short = {"input_ids": torch.tensor([[2, 11, 12]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    padded = {"input_ids": torch.tensor([[2, 11, 12, 0, 0]]), "attention_mask": torch.tensor([[1, 1, 1, 0, 0]])}
    torch.testing.assert_close(model(**short).logits, model(**padded).logits)


def test_last_layer_readout_is_the_model_output_and_round_trips(tmp_path):
    model = tiny_ut().eval()
    out = model(**batch(), output_hidden_states=True)
    readout = ClassifierReadout.from_model(model)
    assert torch.equal(readout(out.hidden_states[-1], batch()["attention_mask"]), out.logits)
    model.save_pretrained(tmp_path / "ut")
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "ut").eval()
    assert type(loaded) is UTForSequenceClassification and loaded.config.num_hidden_layers == L
    assert torch.equal(loaded(**batch()).logits, out.logits)


def test_word_embeddings_from_a_pretrained_encoder(tmp_path):
    encoder = tiny_encoder("bert")
    encoder.save_pretrained(tmp_path / "bert")
    model = UTForSequenceClassification.from_pretrained_embeddings(str(tmp_path / "bert"), num_labels=2)
    table = encoder.get_input_embeddings().weight
    assert model.config.hidden_size == table.shape[1] and model.config.num_hidden_layers == 3
    assert torch.equal(model.get_input_embeddings().weight, table)


def test_a_few_constrained_steps(tmp_path):
    args = ConstrainedConfig(
        output_dir=str(tmp_path), report_to="none", use_cpu=True, save_strategy="no", per_device_train_batch_size=8,
        learning_rate=5e-3, logging_steps=1, max_steps=4, disable_tqdm=True, dual_lr=0.5, descent_alpha=0.1,
        noise_gamma=[0.0, 1.0],
    )  # fmt: skip
    trainer = ConstrainedTrainer(
        model=tiny_ut(),
        args=args,
        train_dataset=presence_dataset(64),
        data_collator=transformers.DataCollatorWithPadding(tiny_tokenizer()),
    )
    trainer.train()
    assert trainer.primal_dual.spec.layers == (1, 2, 3)
    last = trainer.state.log_history[-2]
    assert all(math.isfinite(last[f"layer_loss/{layer}"]) for layer in (1, 2, 3))
    assert max(trainer.primal_dual.multipliers.value()) > 0  # the constraints were measured and acted on
