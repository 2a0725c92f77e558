"""Packed and padding-free batches mean what unpacked ones do: the same documents give the same per-layer losses,
descent statistics, multipliers and verdicts; the readout sample and the noise are drawn per document; a document
longer than `max_length` is cut where unpacked training cuts it; answerless documents are left out, and said; and an
attention that cannot keep documents apart is refused (`constrained_sft.trainers.packing`)."""

import json
import logging

import pytest
import torch
from datasets import Dataset

from constrained_sft.testing import successor_dataset, tiny_causal_lm

MAX_LENGTH = 24


def documents() -> Dataset:
    """Six short documents of mixed lengths and one whose answer runs past `MAX_LENGTH` (cut there, both ways)."""
    rows = successor_dataset(6).to_list()
    rows[1]["completion"] += " a b"
    rows[4]["completion"] = rows[4]["completion"].rsplit(" ", 3)[0]
    rows.append({"prompt": "a b =", "completion": " " + " ".join(["c d"] * 20)})
    return Dataset.from_list(rows)


def trained(make_trainer, attn: str, packing: bool, tmp_path, **config):
    model = tiny_causal_lm("llama")
    model.config._attn_implementation = attn
    trainer = make_trainer(
        model=model, train_dataset=documents(), packing=packing, max_length=MAX_LENGTH, max_steps=3,
        per_device_train_batch_size=16, layer_loss_tokens="all", dual_lr=0.5, output_dir=str(tmp_path / str(packing)),
        **config,
    )  # fmt: skip
    trainer.train()
    return trainer


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_documents_train_as_the_same_documents_unpacked(make_trainer, tmp_path, attn):
    """One step = every document, in one padded batch of 7 rows or in packed rows flattened padding-free; three
    steps: the logged layer losses, descent and feasible fractions, multipliers and the final verdict are equal."""
    padded = trained(make_trainer, attn, False, tmp_path)
    packed = trained(make_trainer, attn, True, tmp_path)
    assert len(padded.train_dataset) == 7 and len(packed.train_dataset) < 7  # several documents per packed row
    logs = [[row for row in t.state.log_history if "loss" in row] for t in (padded, packed)]
    assert len(logs[0]) == len(logs[1]) == 3
    for a, b in zip(*logs, strict=True):
        keys = [k for k in a if k.startswith(("layer_loss/", "dual/", "descent", "feasible", "loss"))]
        assert len(keys) > 8 and set(keys) <= set(b)
        for key in keys:
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
    reports = [json.loads((tmp_path / name / "constraints.json").read_text()) for name in ("False", "True")]
    for key in ("feasible", "holds", "holds_strict", "holds_relaxed", "global_step", "window_steps"):
        assert reports[1][key] == reports[0][key], key  # the verdicts
    for key in ("layer_loss", "slack", "dual"):
        assert reports[1][key] == pytest.approx(reports[0][key], rel=1e-4, abs=1e-6), key
    assert reports[1]["descent_fraction"] == pytest.approx(reports[0]["descent_fraction"])


def test_the_readout_sample_is_drawn_per_document(make_trainer, tmp_path):
    """`layer_loss_tokens=k`: each packed document gets min(k, its supervised tokens), weighted n / min(k, n)."""
    trainer = make_trainer(train_dataset=documents(), packing=True, max_length=MAX_LENGTH, max_steps=1,
                           per_device_train_batch_size=16, layer_loss_tokens=2, output_dir=str(tmp_path))  # fmt: skip
    seen = []
    original = trainer.probe.measure

    def spy(hidden_states, output, request):
        seen.append(request.selection)
        return original(hidden_states, output, request)

    trainer.probe.measure = spy
    trainer.train()
    selection = seen[0]
    counts = selection.segment_tokens
    assert int(counts.gt(0).sum()) == 7  # seven documents in the flattened row, each its own sequence
    per_document = torch.bincount(selection.segment, minlength=counts.numel())
    assert torch.equal(per_document, counts.clamp(max=2))
    expected = counts[selection.segment].float() / counts.clamp(max=2)[selection.segment].float()
    assert torch.allclose(selection.weight, expected)


def test_training_noise_is_drawn_per_document(make_trainer, tmp_path):
    """A padding-free row of seven documents draws seven training levels, and each level perturbs its own document's
    tokens only (levels 0 and > 0 alternating: the documents at 0 are not moved)."""
    trainer = make_trainer(train_dataset=documents(), packing=True, max_length=MAX_LENGTH, max_steps=1,
                           per_device_train_batch_size=16, noise_gamma=[0.0, 2.0], output_dir=str(tmp_path))  # fmt: skip
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    assert trainer.noise.training_levels(batch, True).shape == (7,)
    levels = torch.tensor([0.0, 1.0, 0.0, 2.0, 0.0, 1.5, 0.0])
    embedding = trainer.model.get_input_embeddings()
    clean = embedding(batch["input_ids"]).detach()
    seen = []
    with trainer.noise.for_forward(trainer.model, {**batch, "noise_gamma": levels}, True):
        handle = embedding.register_forward_hook(lambda m, a, out: seen.append(out.detach()))  # after the noise's
        try:
            trainer.model(**{k: v for k, v in batch.items() if k != "labels"})
        finally:
            handle.remove()
    moved = (seen[-1] - clean).abs().amax(-1)[0]  # [T]: how far each token moved
    document = batch["position_ids"][0].eq(0).long().cumsum(0) - 1  # [T] document of each token
    for d, level in enumerate(levels.tolist()):
        assert bool(moved[document == d].gt(0).all()) == (level > 0), (d, level)


def test_answerless_documents_are_left_out_and_said(make_trainer, tmp_path, caplog):
    rows = documents().to_list()
    rows[2]["prompt"] = " ".join(["a"] * 40) + " ="  # its prompt fills max_length: no answer token survives
    with caplog.at_level(logging.WARNING):
        packed = make_trainer(train_dataset=Dataset.from_list(rows), packing=True, max_length=MAX_LENGTH, max_steps=1,
                              output_dir=str(tmp_path / "packed"))  # fmt: skip
    documents_kept = sum(len(r) for r in packed.train_dataset["seq_lengths"])
    assert documents_kept == 6
    assert "1 of 7 rows have no supervised token in their first 24 tokens" in caplog.text


def test_attention_that_cannot_keep_documents_apart_is_refused(make_trainer, tmp_path):
    model = tiny_causal_lm("llama")
    model.config._attn_implementation = "paged|eager"
    with pytest.raises(ValueError, match=r"^`attn_implementation` 'paged\|eager' cannot keep packed documents apart"):
        make_trainer(model=model, packing=True, max_length=MAX_LENGTH, output_dir=str(tmp_path))


def test_a_padding_free_evaluation_batch_is_checked_per_document(make_trainer, tmp_path):
    """32 packed documents side by side are longer than the model's positions, none of them is: evaluated (the GPU
    study's final evaluation was refused so, 2026-11-28, on an H200)."""
    model = tiny_causal_lm("llama")
    model.config.max_position_embeddings = 64  # the trainer reads the bound from the config
    trainer = make_trainer(model=model, train_dataset=successor_dataset(64), eval_dataset=successor_dataset(64),
                           packing=True, max_length=48, max_steps=1, per_device_eval_batch_size=32,
                           output_dir=str(tmp_path))  # fmt: skip
    metrics = trainer.evaluate()
    assert metrics["eval_loss"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (flex attention has no CPU backward)")
def test_packed_documents_under_flex_attention_train_as_unpacked(make_trainer, tmp_path):
    """The GPU study's packed path (`BATCHES=packed`, flex attention's block-sparse document mask): the same
    documents give the same losses and verdicts as one padded sdpa batch, to bf16-free fp32 tolerance."""
    padded = trained(make_trainer, "sdpa", False, tmp_path, use_cpu=False)
    packed = trained(make_trainer, "flex_attention", True, tmp_path, use_cpu=False)
    logs = [[row for row in t.state.log_history if "loss" in row] for t in (padded, packed)]
    for a, b in zip(*logs, strict=True):
        for key in [k for k in a if k.startswith(("layer_loss/", "dual/", "loss"))]:
            assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-5), key
