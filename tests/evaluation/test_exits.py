"""`eval exits`: self-speculative decoding returns exactly greedy decoding's tokens, its counts and intervals are
what they say, and the command writes its report; bad options fail in one line."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from constrained_sft.cli import main as cli
from constrained_sft.evaluation.exits import ExitsArguments, PromptMeasurements
from constrained_sft.evaluation.exits.arguments import default_exits
from constrained_sft.evaluation.exits.command import layer_view, measure_model, summarize_exits
from constrained_sft.evaluation.exits.results import ExitsResults
from constrained_sft.evaluation.instructions import GenerationError
from constrained_sft.testing import tiny_causal_lm, tiny_tokenizer


def test_drafted_decoding_returns_the_greedy_tokens_at_every_exit():
    torch.manual_seed(0)
    model, tokenizer = tiny_causal_lm("llama"), tiny_tokenizer()
    prompts = ["a b c", "d e", "f g h i"]
    measured = measure_model(model, tokenizer, prompts, [1, 2, 3], max_new_tokens=12, desc="t")
    assert measured.tokens == [12, 12, 12] and len(measured.plain_seconds) == 3
    for layer, row in measured.exits.items():
        assert row["identical"] == [True, True, True], layer  # greedy speculative decoding changes no token
        assert all(d >= 1 and v >= 1 for d, v in zip(row["drafted"], row["verified"], strict=True))
        # each verifying forward adds one token after the accepted drafts: no more verifications than tokens
        assert all(v <= t for v, t in zip(row["verified"], measured.tokens, strict=True))
    summary = summarize_exits(measured, n_boot=200)
    for r in summary.values():
        assert 0 <= r.acceptance_rate <= 1 and r.tokens_per_verify >= 1 and r.identical_to_greedy
        assert r.speedup_low <= r.speedup <= r.speedup_high


@pytest.mark.slow  # ~20 s of compiles: the compiled path is `eval generate`'s (tested in the default suite)
def test_compiled_decoding_drafts_and_verifies_the_eager_greedy_tokens():
    """`--compile true`: plain and drafted decoding with a static cache and compiled steps (transformers allows it
    for assisted generation): the same greedy tokens as eager decoding, every exit identical to greedy; its forwards
    counted as eagerly (the counter is a hook on the outer model, outside what is compiled)."""
    torch.manual_seed(0)
    model, tokenizer = tiny_causal_lm("llama").eval(), tiny_tokenizer()
    prompts = ["a b c", "d e", "f g h i"]
    eager = measure_model(model, tokenizer, prompts, [1, 2], max_new_tokens=10, desc="t")
    compiled = measure_model(model, tokenizer, prompts, [1, 2], max_new_tokens=10, desc="t", compile=True)
    assert compiled.tokens == eager.tokens == [10, 10, 10]
    for layer, row in compiled.exits.items():
        assert row["identical"] == [True, True, True], layer
        assert sum(row["verified"]) >= 1 and sum(row["drafted"]) >= 1


def test_each_layers_readout_of_the_answers_ends_at_the_models_own_loss():
    """Layer L is scored as the model scores itself: its loss is the model's own loss on the answer tokens."""
    torch.manual_seed(0)
    model, tokenizer = tiny_causal_lm("llama").eval(), tiny_tokenizer()
    prompts, answers = ["a b c", "d e"], ["f g h", "i j"]
    view = layer_view(model, tokenizer, prompts, answers, [0.0, 2.0], sigma=0.5)
    clean, noisy = view[0.0], view[2.0]
    assert list(clean.loss) == [1, 2, 3, 4] and all(0 <= v <= 1 for v in clean.accuracy.values())
    total, count = 0.0, 0
    for prompt, answer in zip(prompts, answers, strict=True):
        head = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([head + tokenizer(answer, add_special_tokens=False)["input_ids"]])
        labels = ids.clone()
        labels[0, : len(head)] = -100
        n = int((labels[0, 1:] != -100).sum())
        total += model(input_ids=ids, labels=labels).loss.item() * n
        count += n
    assert clean.loss[4] == pytest.approx(total / count, rel=1e-5)
    assert noisy.loss != clean.loss  # the noise reaches every layer


def test_the_summary_pools_the_prompts():
    measured = PromptMeasurements([1.0, 3.0], [10, 10],
                                  {2: {"seconds": [0.5, 1.5], "drafted": [8, 8], "verified": [5, 5], "identical": [True, True]}})  # fmt: skip
    r = summarize_exits(measured, n_boot=100)[2]
    assert r.speedup == pytest.approx(2.0) and r.speedup_low == pytest.approx(2.0)  # every prompt 2x faster
    assert r.acceptance_rate == pytest.approx((20 - 10) / 16) and r.tokens_per_verify == pytest.approx(2.0)
    assert r.tokens_per_second == pytest.approx(20 / 2.0)
    assert default_exits(30) == [8, 15, 22] and default_exits(2) == [1]


def test_the_command_writes_its_report(tmp_path, capsys):
    model_dir = tmp_path / "m"
    tiny_causal_lm("llama").save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"instruction": f"say {w}", "reference": f"{w} {w}"}) for w in "abcd"))
    out = tmp_path / "out"
    argv = ["eval", "exits", "--models", str(model_dir), "--names", "tiny", "--output_dir", str(out),
            "--instructions", str(prompts), "--exit_layers", "1", "3", "--max_new_tokens", "6",
            "--bootstrap_samples", "100", "--gammas", "0", "1"]  # fmt: skip
    assert cli(argv) == 0
    printed = capsys.readouterr().out
    assert "tiny exit layer 1: speed-up" in printed and "tokens = greedy" in printed
    results = json.loads((out / "exits.json").read_text())
    assert set(results["models"]["tiny"]["exits"]) == {"1", "3"} and results["settings"]["n_prompts"] == 4
    assert all(r["identical_to_greedy"] for r in results["models"]["tiny"]["exits"].values())
    page = (out / "report.html").read_text()
    assert "Self-speculative decoding" in page and "data:image/png;base64" in page
    assert np.isfinite(results["models"]["tiny"]["plain_tokens_per_second"])
    layers = results["models"]["tiny"]["layers"]
    assert set(layers) == {"0.0", "1.0"} and set(layers["1.0"]["accuracy"]) == {"1", "2", "3", "4"}
    assert (out / "layer_accuracy.png").stat().st_size > 0 and "reference answers" in page
    assert "accuracy (gamma 1)" in page and "loss (gamma 0)" in page  # the model's per-layer table
    loaded = ExitsResults.load(str(out))
    assert list(loaded.layer_views()) == ["tiny"] and set(loaded.layer_views()["tiny"]) == {0.0, 1.0}
    loaded.models["other"] = dataclasses.replace(loaded.models["tiny"], layers=None)
    assert loaded.layer_views() == {} and not loaded.has_layer_view  # every model's view, or none


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        (dict(models=["m"], output_dir="o", exit_layers=[0]), "`--exit_layers` must be layers >= 1"),
        (dict(models=["m"], output_dir="o", max_new_tokens=0), "`--max_new_tokens` must be an integer >= 1"),
        (dict(models=["a", "b"], names=["x"], output_dir="o"), "`--names` must give one distinct name per model"),
        (dict(output_dir="o"), "`--models` and `--output_dir` are required"),
    ],
)
def test_bad_options_fail_in_one_line_before_any_model_loads(fields, match):
    with pytest.raises(GenerationError, match=match) as error:
        ExitsArguments(**fields).validate()
    assert "\n" not in str(error.value)


def test_a_rerun_reuses_each_models_row_and_measures_only_the_new_model(tmp_path, monkeypatch, capsys):
    """Rows are keyed by the model's weights and the noise scale: the same settings reuse them (no decoding), a model
    added to the command is the only one measured, a model retrained behind its name is refused."""
    from constrained_sft.evaluation.exits import command as exits_module

    for name, seed in (("a", 0), ("b", 1)):
        tiny_causal_lm("llama", seed=seed).save_pretrained(tmp_path / name)
        tiny_tokenizer().save_pretrained(tmp_path / name)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"instruction": f"say {w}"}) for w in "ab"))
    base = ["eval", "exits", "--output_dir", str(tmp_path / "out"), "--instructions", str(prompts),
            "--exit_layers", "1", "--max_new_tokens", "3", "--bootstrap_samples", "50"]  # fmt: skip
    assert cli([*base, "--models", str(tmp_path / "a")]) == 0
    first = json.loads((tmp_path / "out" / "exits.json").read_text())["models"]["a"]
    measured = []
    original = exits_module.measure_model
    monkeypatch.setattr(exits_module, "measure_model", lambda m, t, p, e, n, desc, compile: measured.append(desc) or original(m, t, p, e, n, desc, compile))  # fmt: skip
    assert cli([*base, "--models", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert measured == ["decoding b"]  # a's row reused
    results = json.loads((tmp_path / "out" / "exits.json").read_text())
    assert results["models"]["a"] == first and set(results["models"]) == {"a", "b"}
    tiny_causal_lm("llama", seed=5).save_pretrained(tmp_path / "b")  # retrained behind the same name
    with pytest.raises(ValueError, match=r"rows/b.json was measured from another model behind the name 'b'"):
        cli([*base, "--models", str(tmp_path / "a"), str(tmp_path / "b")])
