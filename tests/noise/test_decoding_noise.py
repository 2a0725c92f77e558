"""Decoding noise drawn ahead of the steps (`noise.noisy_decoding`): eager and compiled decoding read the same draws,
a step asks the host nothing and breaks no graph, gamma 0 is exact, padding is never noised, bad input is refused."""

import pytest
import torch
from torch._dynamo.utils import counters
from torch.overrides import TorchFunctionMode

from constrained_sft.evaluation.decoding import compiled_decoding
from constrained_sft.noise import EmbeddingNoiseError, noise_stream, noisy, noisy_decoding
from constrained_sft.testing import tiny_causal_lm

NEW = 6
GREEDY = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0)


def _batches():
    """Left-padded batches of 3 prompts, of 5, 9 and 7 columns (a run's batches differ in length)."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for T in (5, 9, 7):
        ids = torch.randint(4, 30, (3, T), generator=gen)
        mask = torch.ones_like(ids)
        mask[0, :2] = 0
        mask[1, : T // 2] = 0
        out.append((ids.masked_fill(mask == 0, 0), mask))
    return out


def _decode(model, ids, mask, gamma, seed=3, slots=None, **way):
    with torch.no_grad(), noisy_decoding(model, gamma, noise_stream(model, seed), mask, NEW, slots=slots) as noise:
        return model.generate(ids, attention_mask=mask, **GREEDY, **way), noise


class HostReads(TorchFunctionMode):
    """Counts the calls that make the host wait for a tensor's value (`bool()`, `.item()`, `.tolist()`, ...)."""

    READS = {torch.Tensor.__bool__, torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__int__,
             torch.Tensor.__float__, torch.Tensor.cpu, torch.Tensor.numpy, torch.equal}  # fmt: skip

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += func in self.READS
        return func(*args, **(kwargs or {}))


def test_compiled_decoding_reads_eager_noise_in_one_graph_without_breaks():
    """Three batches of other prompt lengths, decoded eagerly and compiled (one static cache length and one noise
    bank length for the run): the same noisy greedy tokens, one compiled graph for all three, no graph break."""
    model = tiny_causal_lm("llama").eval()
    slots = 9 + NEW
    way = compiled_decoding(torch.device("cpu"), slots)
    eager = [_decode(model, ids, mask, 1.5, slots=slots)[0] for ids, mask in _batches()]
    counters.clear()
    compiled = [_decode(model, ids, mask, 1.5, slots=slots, **way)[0] for ids, mask in _batches()]
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled, strict=True))
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"], dict(counters["graph_break"])
    clean = [model.generate(ids, attention_mask=mask, **GREEDY) for ids, mask in _batches()]
    assert not all(torch.equal(a, b) for a, b in zip(clean, eager, strict=True))  # the noise reached the tokens


@pytest.mark.parametrize("model_kind", ["llama", "gpt2"])
def test_a_step_reads_nothing_from_the_host(model_kind):
    """The host reads `noisy_decoding` adds to a generate() call are a fixed few per batch (on entering the block),
    not one per token; the per-call hook (`noisy`) asks one per step (its all-zero check)."""
    model = tiny_causal_lm(model_kind).eval()
    ids, mask = _batches()[1]

    def reads(new: int, block) -> int:
        with torch.no_grad(), HostReads() as counted, block(new):
            model.generate(ids, attention_mask=mask, **{**GREEDY, "max_new_tokens": new, "min_new_tokens": new})
        return counted.count

    from contextlib import nullcontext

    clean = {n: reads(n, lambda n: nullcontext()) for n in (4, 8)}
    ahead = {n: reads(n, lambda n: noisy_decoding(model, 1.5, noise_stream(model, 0), mask, n)) for n in (4, 8)}
    per_call = {n: reads(n, lambda n: noisy(model, 1.5, noise_stream(model, 0))) for n in (4, 8)}
    # per batch: the levels checked (2), all-zero (1), left padding (1), sigma_x measured (1)
    assert ahead[4] - clean[4] == ahead[8] - clean[8] <= 5
    assert per_call[8] - clean[8] == per_call[4] - clean[4] + 4  # per token


def test_draws_do_not_depend_on_the_bank_length_and_padding_is_never_noised():
    model = tiny_causal_lm("llama").eval()
    ids, mask = _batches()[0]
    short, noise = _decode(model, ids, mask, 1.5)
    long, padded = _decode(model, ids, mask, 1.5, slots=40)
    assert torch.equal(short, long) and padded.bank.shape[1] == 40 and not padded.bank[:, 5 + NEW :].any()
    assert noise.bank.shape[1] == 5 + NEW
    assert torch.equal(noise.bank.ne(0).any(-1)[:, :5], mask.bool())  # the prompts' padding columns: zero
    assert noise.bank[:, 5:].ne(0).all()


def test_gamma_zero_is_exact_and_draws_nothing_and_per_row_levels_apply():
    model = tiny_causal_lm("llama").eval()
    ids, mask = _batches()[2]
    clean = model.generate(ids, attention_mask=mask, **GREEDY)
    out, noise = _decode(model, ids, mask, 0.0)
    assert torch.equal(out, clean) and noise.bank is None
    out, noise = _decode(model, ids, mask, torch.tensor([0.0, 2.0, 0.0]))
    assert not noise.bank[0].any() and not noise.bank[2].any() and noise.bank[1, 5:].std() > 0
    assert torch.equal(out[[0, 2]], clean[[0, 2]])  # the rows at level 0 decode their clean tokens


def test_bad_input_is_refused_before_decoding():
    model = tiny_causal_lm("llama").eval()
    ids, mask = _batches()[0]
    right = mask.flip(1)
    with pytest.raises(EmbeddingNoiseError, match="left-padded"), noisy_decoding(model, 1.0, None, right, NEW):
        pass
    with pytest.raises(EmbeddingNoiseError, match="3 prompts"), noisy_decoding(model, torch.ones(2), None, mask, NEW):
        pass
    with pytest.raises(EmbeddingNoiseError, match="beam search"), noisy_decoding(model, 1.0, None, mask, NEW):
        model.generate(ids, attention_mask=mask, num_beams=2, **GREEDY)
    with pytest.raises(EmbeddingNoiseError, match="gamma"), noisy_decoding(model, -1.0, None, mask, NEW):
        pass
    assert not model.get_input_embeddings()._forward_hooks and not model.model._forward_pre_hooks


@pytest.mark.slow
def test_smollm2_compiled_answers_equal_eager_at_every_level():
    """SmolLM2-135M-Instruct, fp32: a left-padded batch of 4 chat prompts, 16 new tokens, eager and compiled, at
    gamma 0 and 1.5 from the same draws: the same greedy tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from constrained_sft.data.assets import smollm2_path

    path = smollm2_path()
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    prompts = [f"Write one sentence about the number {n}." for n in (3, 1234567, 42, 9)]
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False) for p in prompts]
    enc = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    slots = enc["input_ids"].shape[1] + 16
    kw = dict(max_new_tokens=16, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    for gamma in (0.0, 1.5):
        outs = []
        for way in ({}, compiled_decoding(torch.device("cpu"), slots)):
            stream = noise_stream(model, 0)
            with torch.no_grad(), noisy_decoding(model, gamma, stream, enc["attention_mask"], 16, slots=slots):
                outs.append(model.generate(**enc, **kw, **way))
        assert torch.equal(outs[0], outs[1]), gamma


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graphs_decode_the_eager_noisy_tokens():
    """On CUDA `compiled_decoding` is transformers' default config (inductor with CUDA graphs): the noisy greedy
    tokens of three batches of other prompt lengths equal eager decoding's, in one graph, without a graph break."""
    model = tiny_causal_lm("llama").cuda().eval()
    slots = 9 + NEW
    way = compiled_decoding(torch.device("cuda"), slots)
    batches = [(ids.cuda(), mask.cuda()) for ids, mask in _batches()]
    eager = [_decode(model, ids, mask, 1.5, slots=slots)[0] for ids, mask in batches]
    counters.clear()
    compiled = [_decode(model, ids, mask, 1.5, slots=slots, **way)[0] for ids, mask in batches]
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled, strict=True))
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"], dict(counters["graph_break"])
