"""Per-layer losses as pure functions, on tiny random models: exactness, masks, packing, sampling, memory."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from constrained_sft import CausalLMReadout
from constrained_sft.constraints import descent_counts
from constrained_sft.readout import aggregate, layer_token_nll, layers_token_nll, select_tokens
from constrained_sft.readout import causal_lm as readout_module
from constrained_sft.testing import tiny_causal_lm

ARCHS = ["llama", "qwen2", "mistral", "gpt2"]


def _batch(seed=0, B=3, T=12, V=32):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, V, (B, T), generator=g)
    attention = torch.ones(B, T, dtype=torch.long)
    attention[1, 9:] = 0  # right padding
    labels = ids.clone()
    labels[attention == 0] = -100
    labels[:, :4] = -100  # completion-only: the prompt is not supervised
    return ids, attention, labels


def _all_layer_nll(model, ids, attention, labels, final_norm=True):
    readout = CausalLMReadout.from_model(model)
    out = model(input_ids=ids, attention_mask=attention, labels=labels, output_hidden_states=True)
    sel = select_tokens(labels)
    L = model.config.num_hidden_layers
    nll = [
        layer_token_nll(out.hidden_states[i], sel, readout, apply_norm=final_norm and i < L) for i in range(1, L + 1)
    ]
    return out, sel, torch.stack(nll), readout


@pytest.mark.parametrize("arch", ARCHS)
def test_last_layer_readout_equals_model_loss(arch):
    model = tiny_causal_lm(arch).eval()
    ids, attention, labels = _batch()
    out, sel, nll, _ = _all_layer_nll(model, ids, attention, labels)
    f_L = aggregate(nll, sel).means[-1]
    rel = abs(f_L.item() - out.loss.item()) / out.loss.item()
    assert rel < 1e-5, f"{arch}: f_L={f_L.item()} model loss={out.loss.item()}"


@pytest.mark.parametrize("arch", ARCHS)
def test_hidden_states_are_layer_outputs_and_last_is_normed(arch):
    """hidden_states[l] is layer l's raw output for l < L; hidden_states[L] is already final-normed."""
    model = tiny_causal_lm(arch).eval()
    ids, attention, _ = _batch()
    layers = model.base_model.layers if hasattr(model.base_model, "layers") else model.base_model.h
    raw = []
    hooks = [
        layer.register_forward_hook(lambda m, a, o: raw.append(o[0] if isinstance(o, tuple) else o))
        for layer in layers
    ]
    out = model(input_ids=ids, attention_mask=attention, output_hidden_states=True)
    for h in hooks:
        h.remove()
    L = len(layers)
    for i in range(1, L):
        torch.testing.assert_close(out.hidden_states[i], raw[i - 1])
    norm = CausalLMReadout.from_model(model).final_norm
    torch.testing.assert_close(out.hidden_states[L], norm(raw[L - 1]))


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_intermediate_readout_matches_full_logits(arch):
    model = tiny_causal_lm(arch).eval()
    ids, attention, labels = _batch()
    out, sel, nll, readout = _all_layer_nll(model, ids, attention, labels)
    for i in range(1, model.config.num_hidden_layers):
        logits = model.lm_head(readout.final_norm(out.hidden_states[i]))[:, :-1]
        ref = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), reduction="none")
        torch.testing.assert_close(nll[i - 1], ref[labels[:, 1:].reshape(-1) != -100], rtol=1e-5, atol=1e-5)
    # readout_final_norm=False reads the raw residual stream
    _, _, raw_nll, _ = _all_layer_nll(model, ids, attention, labels, final_norm=False)
    logits = model.lm_head(out.hidden_states[1])[:, :-1]
    ref = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), reduction="none")
    torch.testing.assert_close(raw_nll[0], ref[labels[:, 1:].reshape(-1) != -100], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stack_rows", [16384, 10])  # all layers in one call, or one layer per call
def test_stacked_layers_readout_equals_one_call_per_layer(stack_rows, monkeypatch):
    from constrained_sft.readout import layer_losses

    monkeypatch.setattr(layer_losses, "STACK_ROWS", stack_rows)
    model = tiny_causal_lm("llama").eval()
    ids, attention, labels = _batch()
    readout = CausalLMReadout.from_model(model)
    hidden = [h.detach().requires_grad_(True) for h in model(input_ids=ids, output_hidden_states=True).hidden_states]
    sel = select_tokens(labels, per_sequence=3, seed=0)
    stacked = layers_token_nll(hidden[1:4], sel, readout, apply_norm=True)  # [3, K]
    weights = torch.arange(1.0, 4.0)[:, None]  # a different upstream gradient per layer
    (stacked * weights).sum().backward()
    ours = [h.grad.clone() for h in hidden[1:4]] + [model.lm_head.weight.grad.clone()]
    for h in hidden:
        h.grad = None
    model.zero_grad()
    single = torch.stack([layer_token_nll(h, sel, readout, apply_norm=True) for h in hidden[1:4]])
    (single * weights).sum().backward()
    torch.testing.assert_close(stacked, single, rtol=1e-6, atol=1e-6)
    for a, b in zip(ours, [h.grad for h in hidden[1:4]] + [model.lm_head.weight.grad], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_readout_gradients_match_full_logits():
    model = tiny_causal_lm("llama").eval()
    ids, attention, labels = _batch()
    readout = CausalLMReadout.from_model(model)
    out = model(input_ids=ids, attention_mask=attention, output_hidden_states=True)
    h = out.hidden_states[2].detach().requires_grad_(True)
    sel = select_tokens(labels)
    layer_token_nll(h, sel, readout, apply_norm=True).sum().backward()
    ours_h, ours_w = h.grad.clone(), model.lm_head.weight.grad.clone()
    h.grad = None
    model.zero_grad()
    logits = model.lm_head(readout.final_norm(h))[:, :-1]
    F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), reduction="sum").backward()
    torch.testing.assert_close(ours_h, h.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(ours_w, model.lm_head.weight.grad, rtol=1e-4, atol=1e-6)


def test_a_sample_covering_every_position_reads_the_layers_whole():
    """k >= T - 1 reads every layer as its own [B*T, D] view (no gather, no index-add in the backward): the losses
    and gradients equal those of the same positions gathered, and the weight-0 rows (prompt, padding, the last
    position) add exactly 0 to the layers' gradients."""
    model = tiny_causal_lm("llama").eval()
    ids, attention, labels = _batch()
    readout = CausalLMReadout.from_model(model)
    out = model(input_ids=ids, attention_mask=attention, output_hidden_states=True)
    whole = select_tokens(labels, per_sequence=10_000, seed=2)
    assert whole.whole_layer and whole.hidden_rows(out.hidden_states[1]).data_ptr() == out.hidden_states[1].data_ptr()
    results = []
    for sel in (whole, dataclasses.replace(whole, whole_layer=False)):
        hidden = [h.detach().requires_grad_(True) for h in out.hidden_states[1:3]]
        model.zero_grad()
        nll = layers_token_nll(hidden, sel, readout, apply_norm=True)
        aggregate(nll, sel).sums.sum().backward()
        results.append([nll, *(h.grad for h in hidden), model.lm_head.weight.grad])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    unsupervised = F.pad(labels[:, 1:].eq(-100), (0, 1), value=True)  # [B, T]: rows of weight 0
    assert results[0][1][unsupervised].abs().max().item() == 0.0


def test_masks_padding_and_counts():
    ids, attention, labels = _batch()
    sel = select_tokens(labels)
    shifted = labels[:, 1:]
    assert sel.num_tokens.item() == shifted.ne(-100).sum().item()
    assert torch.equal(sel.targets, shifted.reshape(-1)[sel.index])
    assert sel.segment_tokens.tolist() == shifted.ne(-100).sum(1).tolist()
    assert torch.all(sel.weight == 1)


def test_packed_rows_are_split_into_documents():
    # padding-free: one row, documents restart position ids at 0; TRL masks each document's first label
    position_ids = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4]])
    labels = torch.arange(12).unsqueeze(0) + 4
    labels[position_ids == 0] = -100
    sel = select_tokens(labels, position_ids)
    # shifted positions 0..10 predict labels 1..11; predicting tokens 3, 6 (ends of docs) see a masked label
    assert sel.segment_tokens.tolist() == [3, 2, 4]
    assert sel.segment.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]


def test_sampling_is_unbiased_and_shared_across_layers():
    torch.manual_seed(0)
    B, T = 4, 40
    labels = torch.randint(4, 32, (B, T))
    labels[0, 30:] = -100  # sequences of different lengths
    labels[2, :25] = -100
    token_loss = torch.rand(2, B * (T - 1))  # two "layers" with arbitrary per-token losses
    full = select_tokens(labels)
    exact = aggregate(token_loss[:, full.index], full).sums
    draws = []
    for draw in range(3000):
        sel = select_tokens(labels, per_sequence=5, seed=draw)
        real = sel.weight > 0
        assert torch.all(sel.segment_tokens.clamp(max=5).eq(torch.bincount(sel.segment[real], minlength=B)))
        draws.append(aggregate(token_loss[:, sel.index], sel).sums)
    mean = torch.stack(draws).mean(0)
    torch.testing.assert_close(mean, exact, rtol=0.01, atol=0)
    # k >= T - 1 takes every supervised position with weight 1, and reads the layers whole: every position of the
    # [B, T] grid in order, the rest (unsupervised, and the last of each row) weight-0 rows (static shapes)
    sel = select_tokens(labels, per_sequence=10_000, seed=1)
    real = sel.weight > 0
    assert sel.whole_layer and sel.index.numel() == B * T and torch.equal(sel.positions, torch.arange(B * T))
    assert torch.equal(sel.index[real], full.index) and torch.equal(sel.positions[real], full.positions)
    assert torch.all(sel.weight[real] == 1) and torch.equal(sel.targets[real], full.targets)
    assert sel.weight.view(B, T)[:, -1].tolist() == [0.0] * B and sel.segment.tolist() == sum(
        ([b] * T for b in range(B)), []
    )
    torch.testing.assert_close(aggregate(token_loss[:, sel.index], sel).sums, exact)  # the all-token sums


def test_a_sample_of_unpacked_rows_has_static_shapes():
    """k rows per sequence whatever the labels: a sequence with fewer than k supervised positions gets filler rows of
    weight 0 and target 0 (a valid class id), and a sequence with none reads k fillers."""
    labels = torch.randint(4, 32, (3, 12))
    labels[1, :10] = -100  # labels 10 and 11 left: 2 supervised next-token positions (shifted 9, 10)
    labels[2, :] = -100  # none
    sel = select_tokens(labels, per_sequence=4, seed=3)
    assert sel.index.numel() == 12 and sel.segment.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert sel.segment_tokens.tolist() == [11, 2, 0] and sel.num_tokens.item() == 13
    weight = sel.weight.view(3, 4)
    assert torch.allclose(weight[0], torch.full((4,), 11 / 4)) and weight[1].tolist().count(1.0) == 2
    assert weight[1].tolist().count(0.0) == 2 and weight[2].tolist() == [0.0] * 4
    assert torch.all(sel.targets[sel.weight == 0] == 0)
    losses = aggregate(torch.rand(2, 12), sel)
    assert torch.isfinite(losses.sums).all() and losses.per_sequence[:, 2].tolist() == [0.0, 0.0]


def test_no_supervised_token_gives_zero_not_nan():
    model = tiny_causal_lm("llama")
    ids, attention, labels = _batch()
    labels[:] = -100
    _, sel, nll, _ = _all_layer_nll(model, ids, attention, labels)
    losses = aggregate(nll, sel)
    assert losses.sums.tolist() == [0.0] * 4 and losses.num_tokens.item() == 0
    assert torch.isfinite(losses.means).all()
    assert descent_counts(losses)[1].item() == 0


def test_descent_counts_on_hand_made_example():
    from constrained_sft.constraints import LayerLosses

    per_seq = torch.tensor([[3.0, 2.0, 5.0], [2.5, 2.5, 4.0], [1.0, 3.0, 0.0]])  # [layers, sequences]
    losses = LayerLosses(
        sums=torch.zeros(3), per_sequence=per_seq, segment_tokens=torch.tensor([4, 4, 0]), num_tokens=torch.tensor(8)
    )
    descended, steps = descent_counts(losses)
    # sequence 2 has no token; seq 0: 3>2.5 yes, 2.5>1 yes; seq 1: 2=2.5? no (2<2.5 rises), 2.5<3 rises -> no
    assert (descended.item(), steps.item()) == (2, 4)


class LargestTensor(TorchDispatchMode):
    """Records the largest tensor any op outputs (forward and backward)."""

    numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.numel = max(self.numel, t.numel())
        return out


def test_peak_memory_is_one_chunk_not_all_logits(monkeypatch):
    """Reading out many tokens never builds [K, V] logits: one [chunk, V] block at a time, forward and backward."""
    from constrained_sft.readout import linear_nll as kernel

    monkeypatch.setattr(kernel, "NATIVE_ELEMENTS", 0)
    monkeypatch.setattr(kernel, "KEEP_ELEMENTS", 0)  # large K: recompute instead of keeping probabilities
    monkeypatch.setattr(kernel, "CHUNK_ELEMENTS", 16 * 1024)  # 16 tokens x V per block
    V, D, K = 1024, 8, 256
    head = torch.nn.Linear(D, V, bias=False)
    readout = CausalLMReadout(lm_head=head, final_norm=torch.nn.LayerNorm(D))
    h = torch.randn(K, D, requires_grad=True)
    targets = torch.randint(0, V, (K,))
    with LargestTensor() as seen:
        readout.token_nll(h, targets).sum().backward()
    assert 0 < seen.numel <= 16 * V, f"an op produced {seen.numel} elements; full logits would be {K * V}"
    ref = F.cross_entropy(head(readout.final_norm(h)), targets, reduction="none")
    torch.testing.assert_close(readout.token_nll(h, targets), ref, rtol=1e-5, atol=1e-5)


def test_softcapped_heads_use_the_tiled_kernel(monkeypatch):
    """Gemma-style final-logit softcapping goes through TRL's tiled kernel, which never builds [K, V] either."""
    monkeypatch.setattr(readout_module, "VOCAB_CHUNK", 64)
    V, D, K = 1024, 8, 256
    head = torch.nn.Linear(D, V, bias=False)
    readout = CausalLMReadout(lm_head=head, final_norm=None, final_logit_softcapping=30.0)
    h = torch.randn(K, D, requires_grad=True)
    targets = torch.randint(0, V, (K,))
    with LargestTensor() as seen:
        nll = readout.token_nll(h, targets, apply_norm=False)
        nll.sum().backward()
    assert 0 < seen.numel <= K * 64
    ref = F.cross_entropy(30.0 * torch.tanh(head(h) / 30.0), targets, reduction="none")
    torch.testing.assert_close(nll, ref, rtol=1e-5, atol=1e-5)


def test_a_row_draws_the_same_sample_whichever_micro_batch_carries_it():
    """Keys depend on (seed, global row) only: rows 2-3 of a batch of 4 equal rows 0-1 of a micro-batch starting at
    global row 2, so gradient accumulation and data parallelism sample exactly like one large batch."""
    labels = torch.randint(4, 32, (4, 20))
    whole = select_tokens(labels, per_sequence=3, seed=7)
    second = select_tokens(labels[2:], per_sequence=3, seed=7, first_row=2)
    width = labels.shape[1] - 1
    assert torch.equal(whole.index[whole.index >= 2 * width] - 2 * width, second.index)
    assert not torch.equal(select_tokens(labels, per_sequence=3, seed=8).index, whole.index)


@pytest.mark.parametrize("per_sequence", [3, 10_000])  # a drawn sample; every position
def test_a_selection_first_built_under_inference_mode_serves_autograd_later(per_sequence):
    """A batch shape's index tensors are kept between micro-batches: built first by an evaluation under
    `torch.inference_mode()`, they must still be usable (saved for backward) by a training step."""
    labels = torch.randint(4, 32, (3, 17))
    with torch.inference_mode():
        select_tokens(labels, per_sequence=per_sequence, seed=5, first_row=123)
    sel = select_tokens(labels, per_sequence=per_sequence, seed=5, first_row=123)
    hidden = torch.randn(3, 17, 8, requires_grad=True)
    sel.hidden_rows(hidden).mul(sel.weight[:, None]).sum().backward()
    assert hidden.grad.abs().sum() > 0
