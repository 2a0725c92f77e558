"""Room to decode (`evaluation.lengths`), checked from a model's config and tokenizer before it loads: the longest
prompt plus `--max_new_tokens` against the model's positions, and what decoding allocates up front (the noise bank;
compiled, the static KV cache) against the memory free, each figure the one decoding really allocates."""

import pytest
import torch

from constrained_sft.data import ModelSpec
from constrained_sft.evaluation.alpaca.generate import GenerateArguments
from constrained_sft.evaluation.alpaca.generate import run as generate
from constrained_sft.evaluation.instructions import GenerationError, prompts_for
from constrained_sft.evaluation.lengths import Decoding, check_decoding, upfront_bytes
from constrained_sft.noise import noise_stream, noisy_decoding
from constrained_sft.tasks import SFTTask, get_task
from constrained_sft.testing import SYMBOLS, tiny_causal_lm, tiny_tokenizer

ROWS = [
    {"instruction": " ".join(SYMBOLS[:3]), "dataset": "toy"},
    {"instruction": " ".join(SYMBOLS[:9]), "dataset": "toy"},
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """`lm`: a tiny Llama of 256 positions; `long`: its config with 2**40 positions and no weights (the check reads
    none)."""
    root = tmp_path_factory.mktemp("lengths")
    model = tiny_causal_lm("llama")
    model.save_pretrained(root / "lm")
    tiny_tokenizer().save_pretrained(root / "lm")
    model.config.max_position_embeddings = 2**40
    model.config.save_pretrained(root / "long")
    tiny_tokenizer().save_pretrained(root / "long")
    return root


def longest_prompt(folder) -> int:
    tokenizer = tiny_tokenizer()
    return max(
        len(ids) for ids in tokenizer(prompts_for(tokenizer, ROWS, None), add_special_tokens=False)["input_ids"]
    )


def test_more_positions_than_the_model_has_are_refused_naming_both_numbers(folders):
    spec, longest = ModelSpec("lm", str(folders / "lm")), longest_prompt(folders / "lm")
    message = (
        rf"`--max_new_tokens` 1000000000 with the longest prompt \({longest} tokens\) needs {10**9 + longest} "
        rf"positions; lm's model has 256 \(max_position_embeddings\): give `--max_new_tokens` {256 - longest} or less\."
    )
    with pytest.raises(GenerationError, match=f"^{message}$"):
        check_decoding(spec, ROWS, None, Decoding(10**9, 8, compile=True, noisy=True))
    check_decoding(spec, ROWS, None, Decoding(256 - longest, 8, compile=True, noisy=True))  # the room exactly
    long = [{"instruction": " ".join([SYMBOLS[0]] * 300)}]  # a prompt longer than the model alone
    with pytest.raises(
        GenerationError, match=r"^`--exit_new_tokens` 1 with .* has 256 .*: give shorter instructions\.$"
    ):
        check_decoding(spec, long, None, Decoding(1, 1, compile=False, noisy=False, flag="--exit_new_tokens"))


def test_what_decoding_allocates_up_front_is_refused_beyond_the_memory_free(folders):
    spec = ModelSpec("long", str(folders / "long"))
    with pytest.raises(
        GenerationError, match=r"static KV cache [\d.]+ GiB\); (cpu|cuda) has [\d.]+ GiB free: .*--compile false"
    ):
        check_decoding(spec, ROWS, None, Decoding(10**10, 8, compile=True, noisy=False))
    with pytest.raises(GenerationError, match=r"\(noise bank [\d.]+ GiB\); (cpu|cuda) has .* the batch size\.$"):
        check_decoding(spec, ROWS, None, Decoding(10**10, 8, compile=False, noisy=True))
    check_decoding(spec, ROWS, None, Decoding(10**10, 8, compile=False, noisy=False))  # eager, quiet: nothing up front


def test_the_figures_are_what_decoding_allocates(folders):
    """The static cache transformers allocates and the noise bank drawn, byte for byte, for one batch of `ROWS`."""
    model, tokenizer = get_task(SFTTask.name).measuring.load_model(ModelSpec("lm", str(folders / "lm")), torch.float32)
    tokenizer.padding_side = "left"
    enc = tokenizer(prompts_for(tokenizer, ROWS, None), return_tensors="pt", padding=True, add_special_tokens=False)
    new, slots = 5, enc["input_ids"].shape[1] + 5
    with noisy_decoding(model, 1.0, noise_stream(model, 0), enc["attention_mask"], new, slots=slots) as noise:
        out = model.generate(**enc, max_new_tokens=new, do_sample=False, cache_implementation="static",
                             max_cache_len=slots, return_dict_in_generate=True)  # fmt: skip
    cache = sum(
        t.numel() * t.element_size() for layer in out.past_key_values.layers for t in (layer.keys, layer.values)
    )
    assert noise.bank is not None
    figures = upfront_bytes(model.config, slots, Decoding(new, len(ROWS), compile=True, noisy=True))
    assert figures == {"noise bank": noise.bank.numel() * 4, "static KV cache": cache}


def test_eval_generate_refuses_before_the_model_loads_and_writes_nothing(folders, tmp_path, monkeypatch):
    def no_loading(*_):
        raise AssertionError("the model loaded")

    monkeypatch.setattr(type(get_task(SFTTask.name).measuring), "load_model", no_loading)
    (tmp_path / "rows.jsonl").write_text("".join(f'{{"instruction": "{r["instruction"]}"}}\n' for r in ROWS))
    args = GenerateArguments(
        model=str(folders / "lm"), instructions=str(tmp_path / "rows.jsonl"), output_dir=str(tmp_path / "out"),
        max_new_tokens=10**9, compile=True,
    )  # fmt: skip
    with pytest.raises(GenerationError, match=r"needs 10000000\d\d positions; lm's model has 256"):
        generate(args)
    assert not (tmp_path / "out").exists()
