"""Embedding noise: statistics, exactness of gamma=0, generation, per-example levels, PEFT, padding, bad input."""

import pytest
import torch
from transformers import DataCollatorWithPadding
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

from constrained_sft import EmbeddingNoiseCollator, EmbeddingNoiseError, embedding_noise, embedding_sigma
from constrained_sft.noise import input_embedding_module
from constrained_sft.testing import tiny_causal_lm


def _embeds(model, noise=None, **call):
    """The embedding module's output for one call, noised by `embedding_noise(**noise)` when given."""
    outs = []

    def run():
        # registered after the noise hook, so it sees what the model sees
        handle = input_embedding_module(model).register_forward_hook(
            lambda m, a, out: outs.append(out.detach().clone())
        )
        model(**call)
        handle.remove()

    if noise is None:
        run()
        return outs[0], None
    with embedding_noise(model, **noise) as state:
        run()
    return outs[0], state


def _added_noise(model, noise, **call):
    clean, _ = _embeds(model, **call)
    noisy, state = _embeds(model, noise, **call)
    return noisy - clean, state


def test_sigma_is_the_std_of_the_embedding_matrix():
    model = tiny_causal_lm("llama")
    w = model.get_input_embeddings().weight
    assert embedding_sigma(model) == pytest.approx(w.float().std(unbiased=False).item(), rel=1e-6)


@pytest.mark.parametrize(("gamma", "mean"), [(1.5, 0.0), (0.5, 0.3)])
def test_noise_statistics_match_gamma_sigma_and_mean(gamma, mean):
    model = tiny_causal_lm("llama", hidden=64).eval()
    ids = torch.randint(4, 32, (64, 256))  # 64 * 256 * 64 = 1M noise draws
    noise, _ = _added_noise(model, {"gamma": gamma, "mean": mean, "seed": 0}, input_ids=ids)
    sigma = embedding_sigma(model)
    assert noise.std().item() == pytest.approx(gamma * sigma, rel=0.02)
    assert noise.mean().item() == pytest.approx(mean, abs=0.01 * gamma * sigma + 1e-6)


def test_gamma_zero_is_a_bit_exact_no_op_and_exit_restores_the_clean_model():
    model = tiny_causal_lm("llama").eval()
    ids = torch.randint(4, 32, (2, 10))
    clean = model(input_ids=ids).logits
    with embedding_noise(model, gamma=0.0, mean=0.7, seed=0):
        assert torch.equal(model(input_ids=ids).logits, clean)
    with embedding_noise(model, gamma=1.0, seed=0):
        assert not torch.equal(model(input_ids=ids).logits, clean)
    assert torch.equal(model(input_ids=ids).logits, clean)
    assert not model.get_input_embeddings()._forward_hooks and not model.model._forward_pre_hooks


def test_seeded_noise_is_reproducible():
    model = tiny_causal_lm("llama").eval()
    ids = torch.randint(4, 32, (2, 10))
    runs = []
    for _ in range(2):
        with embedding_noise(model, gamma=1.0, seed=123):
            runs.append(model(input_ids=ids).logits)
    assert torch.equal(runs[0], runs[1])
    with embedding_noise(model, gamma=1.0, seed=124):
        assert not torch.equal(model(input_ids=ids).logits, runs[0])


def test_noise_reaches_every_generation_step_with_kv_cache():
    model = tiny_causal_lm("llama").eval()
    ids = torch.tensor([[1, 9, 10, 6], [1, 11, 12, 6]])
    calls = []
    handle = model.register_forward_pre_hook(lambda m, a, k: calls.append(k["input_ids"].shape[1]), with_kwargs=True)
    with embedding_noise(model, gamma=2.0, seed=0) as noise:
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=5,
            do_sample=False,
            min_new_tokens=5,
            use_cache=True,
        )
    handle.remove()
    assert calls[0] == 4 and calls[1:] == [1] * 4  # prompt, then one token per step from the cache
    assert noise.calls == len(calls) == 5  # every forward call, prompt and each generated token, was perturbed
    # the noisy continuation is generated from perturbed embeddings: step logits differ from clean ones
    clean = model(input_ids=out).logits
    with embedding_noise(model, gamma=2.0, seed=0):
        noisy = model(input_ids=out).logits
    assert not torch.allclose(clean, noisy)


def test_a_static_cache_decodes_the_dynamic_caches_noisy_tokens():
    """`cache_implementation="static"` (transformers' first step to compiled decoding) hands the backbone a
    [B, 1, T, L] attention mask on its decoding steps, not a padding mask: the hook leaves it out (every token of a
    step is real) and the left-padded batch decodes the dynamic cache's noisy tokens from the same draws. Before, the
    4-D mask broadcast into the noise and the step failed (a size mismatch; SmolLM2: an IndexError)."""
    model = tiny_causal_lm("llama").eval()
    ids = torch.tensor([[0, 0, 9, 10, 6], [1, 11, 12, 13, 6]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    kw = dict(attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
    outs, calls = [], []
    for cache in (None, "static"):
        with embedding_noise(model, gamma=1.5, seed=3) as noise:
            outs.append(model.generate(ids, cache_implementation=cache, **kw))
        calls.append(noise.calls)
    assert torch.equal(outs[0], outs[1]) and calls == [6, 6]
    with embedding_noise(model, gamma=1.5, seed=4):  # another draw decodes otherwise: the noise reached the steps
        assert not torch.equal(model.generate(ids, cache_implementation="static", **kw), outs[1])


def test_per_example_gamma_gives_each_row_its_level():
    model = tiny_causal_lm("llama", hidden=64).eval()
    ids = torch.randint(4, 32, (3, 512))
    gamma = torch.tensor([0.0, 0.5, 2.0])
    noise, _ = _added_noise(model, {"gamma": gamma, "seed": 0}, input_ids=ids)
    sigma = embedding_sigma(model)
    assert noise[0].abs().max().item() == 0.0
    assert noise[1].std().item() == pytest.approx(0.5 * sigma, rel=0.03)
    assert noise[2].std().item() == pytest.approx(2.0 * sigma, rel=0.03)


def test_padding_is_never_noised():
    model = tiny_causal_lm("llama").eval()
    ids = torch.randint(4, 32, (2, 8))
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0  # right padding
    mask[1, :3] = 0  # left padding (batched generation)
    noise, _ = _added_noise(model, {"gamma": 1.0, "seed": 0}, input_ids=ids, attention_mask=mask)
    changed = (noise != 0).any(-1)
    assert torch.equal(changed, mask.bool())


def test_peft_wrapped_models_are_noised():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_causal_lm("llama"), LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).eval()
    ids = torch.randint(4, 32, (2, 6))
    mask = torch.ones_like(ids)
    mask[0, 4:] = 0
    clean = model(input_ids=ids, attention_mask=mask).logits
    with embedding_noise(model, gamma=1.0, seed=0) as noise:
        noisy = model(input_ids=ids, attention_mask=mask).logits
    assert noise.calls == 1 and not torch.allclose(clean, noisy)
    assert noise.mask is not None  # the attention mask was seen through the PEFT wrapper


def test_hooks_are_removed_when_the_block_raises():
    model = tiny_causal_lm("llama").eval()
    ids = torch.randint(4, 32, (1, 5))
    clean = model(input_ids=ids).logits
    with pytest.raises(RuntimeError, match="boom"), embedding_noise(model, gamma=1.0, seed=0):
        raise RuntimeError("boom")
    assert torch.equal(model(input_ids=ids).logits, clean)
    assert not model.get_input_embeddings()._forward_hooks


def test_padding_free_rows_take_one_level_per_document():
    model = tiny_causal_lm("llama", hidden=64).eval()
    ids = torch.randint(4, 32, (1, 600))
    position_ids = torch.cat([torch.arange(300), torch.arange(300)]).unsqueeze(0)
    noise, _ = _added_noise(
        model, {"gamma": torch.tensor([0.0, 1.0]), "seed": 0}, input_ids=ids, position_ids=position_ids
    )
    assert noise[0, :300].abs().max() == 0
    assert noise[0, 300:].std().item() == pytest.approx(embedding_sigma(model), rel=0.05)


@pytest.mark.parametrize(
    "base",
    [DataCollatorForLanguageModeling(pad_token_id=0), "transformers"],
)
def test_collator_wraps_trl_and_transformers_collators(base):
    from constrained_sft.testing import tiny_tokenizer

    if base == "transformers":
        base = DataCollatorWithPadding(tiny_tokenizer())
    examples = [{"input_ids": [1, 9, 10]}, {"input_ids": [1, 11]}, {"input_ids": [1, 12, 13, 14]}]
    batch = EmbeddingNoiseCollator(base, gamma_levels=[0.5, 1.5], seed=0)(examples)
    assert batch["input_ids"].shape[0] == 3 and batch["noise_gamma"].shape == (3,)
    assert set(batch["noise_gamma"].tolist()) <= {0.5, 1.5}


def test_collator_draws():
    base = DataCollatorForLanguageModeling(pad_token_id=0)
    rng = EmbeddingNoiseCollator(base, gamma_range=(0.5, 2.0), clean_prob=0.25, seed=0).sample(20000)
    clean = rng.eq(0).float().mean().item()
    noisy = rng[rng > 0]
    assert clean == pytest.approx(0.25, abs=0.02)
    assert noisy.min() >= 0.5 and noisy.max() <= 2.0 and noisy.mean().item() == pytest.approx(1.25, abs=0.02)
    assert EmbeddingNoiseCollator(base, gamma=1.5).sample(4).tolist() == [1.5] * 4


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"gamma": -0.1}, "gamma.*>= 0"),
        ({"gamma_range": (2.0, 1.0)}, "gamma_min <= gamma_max"),
        ({"gamma_range": (1.0,)}, "gamma_range"),
        ({"gamma_levels": [0.5, -1.0]}, "gamma_levels.*>= 0"),
        ({"gamma": 1.0, "clean_prob": 1.5}, r"clean_prob.*\[0, 1\]"),
        ({"gamma": 1.0, "clean_prob": -0.1}, r"clean_prob.*\[0, 1\]"),
        ({"gamma": 1.0, "gamma_range": (0, 1)}, "exactly one"),
    ],
)
def test_collator_bad_input(kwargs, pattern):
    with pytest.raises(EmbeddingNoiseError, match=pattern):
        EmbeddingNoiseCollator(DataCollatorForLanguageModeling(pad_token_id=0), **kwargs)


def test_bad_gamma_and_model_without_embeddings():
    model = tiny_causal_lm("llama")
    with pytest.raises(EmbeddingNoiseError, match="gamma.*>= 0"), embedding_noise(model, gamma=-1.0):
        pass
    with (
        pytest.raises(EmbeddingNoiseError, match="gamma.*>= 0"),
        embedding_noise(model, gamma=torch.tensor([1.0, -2.0])),
    ):
        pass

    class NoEmbeddings(torch.nn.Module):
        def forward(self, x):
            return x

    with (
        pytest.raises(EmbeddingNoiseError, match="NoEmbeddings has no input embedding module"),
        embedding_noise(NoEmbeddings(), gamma=1.0),
    ):
        pass


@pytest.mark.parametrize("optimizer", ["foreach", "fused"])
def test_sigma_follows_an_optimizer_step(optimizer):
    """Fused AdamW (Trainer's default) updates the table without bumping its version: sigma_x must still follow."""
    model = tiny_causal_lm("llama")
    first = embedding_sigma(model)
    adam = torch.optim.AdamW(model.parameters(), lr=0.5, **{optimizer: True})
    model(input_ids=torch.randint(4, 28, (2, 8)), labels=torch.randint(4, 28, (2, 8))).loss.backward()
    adam.step()
    weight = model.get_input_embeddings().weight.detach()
    assert embedding_sigma(model) == pytest.approx(weight.double().std(unbiased=False).item(), rel=1e-6)
    assert embedding_sigma(model) != pytest.approx(first, rel=1e-3)


def test_a_given_sigma_sets_the_noise_scale_whatever_the_model():
    model = tiny_causal_lm("llama").eval()
    ids = torch.randint(4, 28, (8, 64))
    clean = model.get_input_embeddings()(ids)
    with embedding_noise(model, gamma=2.0, sigma=0.05, seed=0):
        noisy = model.get_input_embeddings()(ids)
    assert (noisy - clean).std().item() == pytest.approx(0.1, rel=0.03)  # gamma x the given sigma
    with (
        pytest.raises(EmbeddingNoiseError, match="`sigma` must be a finite number > 0"),
        embedding_noise(model, gamma=1.0, sigma=0.0),
    ):
        pass


def test_the_chunked_std_equals_torch_std(monkeypatch):
    from constrained_sft.noise import embedding as noise_module

    monkeypatch.setattr(noise_module, "CHUNK_ELEMENTS", 100)  # many chunks, one partial
    weight = torch.randn(37, 16) * 3 + 1
    assert noise_module.table_std(weight) == pytest.approx(weight.double().std(unbiased=False).item(), rel=1e-6)


def test_collator_streams_differ_across_ranks_and_workers(monkeypatch):
    """rank 0 / worker 1 and rank 1 / worker 0 used to share a seed."""
    from types import SimpleNamespace

    from constrained_sft.noise import collator as collator_module

    def draws(rank, worker):
        monkeypatch.setattr(collator_module.torch.utils.data, "get_worker_info", lambda: SimpleNamespace(id=worker))
        return EmbeddingNoiseCollator(lambda rows: {}, gamma_range=[0.0, 2.0], seed=0, rank=rank).sample(8)

    streams = [draws(0, 0), draws(0, 1), draws(1, 0), draws(1, 1)]
    assert all(not torch.equal(a, b) for i, a in enumerate(streams) for b in streams[i + 1 :])
    assert torch.equal(draws(1, 0), streams[2])  # and each is reproducible


def test_the_moved_entry_points_still_import_from_their_old_module_with_a_warning():
    """`noise.embedding.noisy` / `embedding_noise` (the previous release's paths) moved to `noise.entry`; a user's
    import of the old path still works for a release, warning where they went (a fresh interpreter: no module cached)."""
    import subprocess
    import sys

    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    from constrained_sft.noise.embedding import embedding_noise, noisy\n"
        "from constrained_sft.noise import entry\n"
        "assert embedding_noise is entry.embedding_noise and noisy is entry.noisy\n"
        "moved = [str(w.message) for w in caught if w.category is FutureWarning]\n"
        "assert len(moved) == 2 and all('constrained_sft.noise.entry' in m for m in moved), moved\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
