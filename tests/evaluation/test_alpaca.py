"""AlpacaEval harness: noisy generation in alpaca_eval's format, resume, and head-to-head judging end to end."""

import json
import os

import pytest
import transformers

from constrained_sft.cli import main as cli
from constrained_sft.evaluation.alpaca import AlpacaArguments, JudgeError, judge_setup, length_controlled
from constrained_sft.evaluation.alpaca import run as judge
from constrained_sft.evaluation.alpaca.annotator_configs import JUDGE_CONFIGS, offline_test_completions
from constrained_sft.evaluation.alpaca.generate import GenerateArguments
from constrained_sft.evaluation.alpaca.generate import run as generate
from constrained_sft.evaluation.instructions import ALPACA_EVAL, GenerationError, load_instructions
from constrained_sft.testing import SYMBOLS, tiny_causal_lm, tiny_tokenizer

pytest.importorskip("alpaca_eval")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    paths = {}
    for name, seed in (("constrained", 0), ("erm", 1)):
        tiny_causal_lm("llama", seed=seed).save_pretrained(root / name)
        tiny_tokenizer().save_pretrained(root / name)
        paths[name] = str(root / name)
    return paths


def _instructions(path, n=10):
    rows = [{"instruction": " ".join(SYMBOLS[i : i + 3]), "dataset": "toy"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _generate(models, tmp_path, name, **overrides):
    tmp_path.mkdir(parents=True, exist_ok=True)
    args = GenerateArguments(
        model=models[name],
        name=name,
        instructions=_instructions(tmp_path / "instructions.jsonl"),
        output_dir=str(tmp_path / "gens"),
        gammas=[0.0, 1.5],
        batch_size=4,
        max_new_tokens=6,
        **overrides,
    )
    return generate(args)


def _load(path):
    with open(path) as f:
        return json.load(f)


def test_generation_writes_alpaca_eval_files_with_noise(models, tmp_path):
    paths = _generate(models, tmp_path, "constrained")
    clean, noisy = (_load(paths[g].path) for g in (0.0, 1.5))
    for rows in (clean, noisy):
        assert len(rows) == 10
        assert all(set(r) == {"instruction", "output", "generator", "dataset"} for r in rows)
        assert all(r["generator"] == "constrained" and r["dataset"] == "toy" and r["output"] for r in rows)
    assert [r["output"] for r in clean] != [r["output"] for r in noisy]  # the noise reached generation
    for gamma, rows in ((0.0, clean), (1.5, noisy)):  # what the writer knew, returned: no file reread to learn it
        level = paths[gamma]
        assert (level.gamma, level.answers, level.empty) == (gamma, 10, sum(not r["output"].strip() for r in rows))
    again = _generate(models, tmp_path / "again", "constrained")
    assert _load(again[1.5].path) == noisy  # seeded: the same noisy answers


def test_resume_skips_finished_batches_and_equals_an_uninterrupted_run(models, tmp_path, monkeypatch):
    full = _load(_generate(models, tmp_path / "full", "constrained")[1.5].path)
    paths = _generate(models, tmp_path, "constrained")
    first_six = _load(paths[1.5].path)[:6]
    with open(paths[1.5].path, "w") as f:  # interrupted after 6 answers: the batch of 4 at row 4 was half written
        json.dump(first_six, f)
    calls = []
    original = transformers.GenerationMixin.generate
    monkeypatch.setattr(
        transformers.GenerationMixin,
        "generate",
        lambda self, **kw: calls.append(kw["input_ids"].shape[0]) or original(self, **kw),
    )
    _generate(models, tmp_path, "constrained")
    assert calls == [4, 2]  # gamma 0 was complete; gamma 1.5 restarts at row 4: rows 4-7 and 8-9
    assert _load(paths[1.5].path) == full


def test_resume_with_other_settings_is_refused(models, tmp_path):
    _generate(models, tmp_path, "constrained")
    with pytest.raises(GenerationError, match="seed: 0"):
        _generate(models, tmp_path, "constrained", seed=1)


def test_compiled_generation_writes_the_eager_answers(models, tmp_path):
    """`--compile true` (a static cache and a compiled step, the noise drawn ahead of it): every level's answers
    equal eager decoding's, a smaller last batch (10 rows by 4) included; a folder of the other way is not resumed."""
    eager = _generate(models, tmp_path / "eager", "constrained")
    compiled = _generate(models, tmp_path / "compiled", "constrained", compile=True)
    for gamma in (0.0, 1.5):
        assert _load(compiled[gamma].path) == _load(eager[gamma].path), gamma
    with pytest.raises(GenerationError, match=r"compile: True"):
        _generate(models, tmp_path / "compiled", "constrained")


def _as_earlier_version(path, *keys, version="0.0.9"):
    """The generator folder of the answers at `path` as an earlier version wrote it: its settings without `keys`,
    its folder's record naming `version`."""
    settings = os.path.join(os.path.dirname(path), "settings.json")
    saved = _load(settings)
    for key in keys:
        del saved[key]
    with open(settings, "w") as f:
        json.dump(saved, f)
    record = os.path.join(os.path.dirname(os.path.dirname(path)), ".written-by.json")
    marked = _load(record)
    marked["commands"]["eval generate"]["version"] = version
    with open(record, "w") as f:
        json.dump(marked, f)


def test_a_folder_of_noise_drawn_call_by_call_is_not_resumed(models, tmp_path):
    """Answers written before the noise was drawn ahead of decoding (settings without `noise_draws`) came from other
    draws: continuing them would mix two noises in one file. The refusal names the version, what it did and what to
    do, never a setting no flag sets."""
    paths = _generate(models, tmp_path, "constrained", max_instances=4)
    _as_earlier_version(paths[1.5].path, "noise_draws", "compile")
    folder = os.path.dirname(paths[1.5].path)
    message = (
        rf"^{folder} was written by constrained-sft 0.0.9, which decoded eagerly \(its settings.json has no `compile`\); "
        r"drew the noise call by call as it decoded, not every slot ahead of decoding \(its settings.json has no "
        rf"`noise_draws`\); its answers cannot be continued: give a new `--output_dir` or `--name`, or remove {folder} "
        r"to answer again with this version\.$"
    )
    before = {p: _load(paths[g].path) for g, p in ((g, paths[g].path) for g in paths)}
    with pytest.raises(GenerationError, match=message):
        _generate(models, tmp_path, "constrained", max_instances=4, compile=True)
    assert {p: _load(p) for p in before} == before  # nothing rewritten
    _as_earlier_version(paths[1.5].path, "model_fingerprint")
    with pytest.raises(GenerationError, match=r"did not record which weights answered.* cannot be continued"):
        _generate(models, tmp_path, "constrained", max_instances=4)


def test_an_earlier_versions_eager_folder_is_continued_eagerly_only(models, tmp_path):
    """A folder written before `compile` was a setting decoded eagerly: continued as it is, refused compiled naming
    the flag that continues it."""
    paths = _generate(models, tmp_path, "constrained", max_instances=4)
    _as_earlier_version(paths[1.5].path, "compile", version="0.1.0")
    folder = os.path.dirname(paths[1.5].path)
    with pytest.raises(GenerationError, match=r"an earlier build of constrained-sft 0\.1\.0, which decoded eagerly .* "
                       r"continue it with `--compile false`, or give a new `--output_dir`"):  # fmt: skip
        _generate(models, tmp_path, "constrained", max_instances=4, compile=True)
    again = _generate(models, tmp_path, "constrained", max_instances=4)
    assert _load(again[1.5].path) == _load(paths[1.5].path) and os.path.isdir(folder)


def test_instruction_sources(tmp_path, monkeypatch):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(GenerationError, match="row 0 has no non-empty string `instruction`"):
        load_instructions(str(bad))
    with pytest.raises(GenerationError, match="neither a local .json/.jsonl file nor"):
        load_instructions("some/dataset")
    hub_file = tmp_path / "alpaca_eval.json"  # the Hub loader, through the same code, with a local file
    hub_file.write_text(json.dumps([{"instruction": "a", "dataset": "helpful_base"}, {"instruction": "b"}]))
    seen = {}
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda **kw: seen.update(kw) or str(hub_file))
    rows = load_instructions(ALPACA_EVAL)
    assert seen["repo_id"] == ALPACA_EVAL and seen["repo_type"] == "dataset"
    assert rows == [{"instruction": "a", "dataset": "helpful_base"}, {"instruction": "b", "dataset": "alpaca_eval"}]


def _expected_win_rate(model_rows, reference_rows):
    """What the offline test judge must give, computed without alpaca_eval: order-independent, draws count half."""
    with open(os.path.join(JUDGE_CONFIGS, "pairwise_prompt.txt")) as f:
        template = f.read()
    score = 0.0
    for m, r in zip(model_rows, reference_rows, strict=True):
        prompt = template.format(instruction=m["instruction"], output_1=r["output"], output_2=m["output"])
        verdict = offline_test_completions([prompt])["completions"][0]
        score += 1.0 if m["output"] == r["output"] else {"Output (b)": 1.0, "Output (a)": 0.0, "Draw": 0.5}[verdict]
    return 100 * score / len(model_rows)


def test_judge_pipeline_end_to_end_with_the_offline_judge(models, tmp_path, capsys):
    for name in models:
        _generate(models, tmp_path, name)
    report = tmp_path / "report"
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text("".join(json.dumps({"prompt": f"s{i} s{i + 1} =", "completion": f" s{i + 2}"}) + "\n"
                                for i in range(12)))  # fmt: skip
    robustness = ["eval", "robustness", "--models", *models.values(), "--names", *models, "--dataset_name",
                  str(held_out), "--eval_size", "8", "--output_dir", str(report), "--gammas", "0", "1", "--seeds", "1",
                  "--bootstrap_samples", "50"]  # fmt: skip
    assert cli(robustness) == 0  # a shared report folder: robustness first, the head-to-head joins its page
    assert (
        cli(
            ["eval", "alpaca", "--generations", str(tmp_path / "gens"), "--judge", "test", "--output_dir", str(report)]
        )
        == 0
    )
    result = _load(report / "alpaca_eval.json")
    assert [lv["gamma"] for lv in result["levels"]] == [0.0, 1.5]
    for lv in result["levels"]:
        gens = [_load(tmp_path / "gens" / n / f"gamma_{lv['gamma']}.json") for n in ("constrained", "erm")]
        assert lv["win_rate"] == pytest.approx(_expected_win_rate(*gens))
        assert lv["n_verdicts"] == 20 and lv["unparsed"] == 0  # 10 pairs, each judged in both orders
        assert lv["low"] <= lv["win_rate"] <= lv["high"] and lv["high"] - lv["low"] > 0
        assert lv["order_agreement"] == 1.0  # the test judge reads both answers alike, whatever their order
        assert lv["lc_win_rate"] is None
    assert "805 AlpacaEval instructions" in result["lc_missing_reason"]
    assert os.path.isfile(report / "alpaca_win_rate.png")
    page = (report / "report.html").read_text()
    assert "Head-to-head: constrained vs erm" in page and "Robustness report" in page
    assert page.count("data:image/png;base64,") == 6  # the robustness part's 5 plots, read back, and the win rates
    assert cli(robustness) == 0  # the robustness part rewritten: the head-to-head stays
    again = (report / "report.html").read_text()
    assert "Head-to-head: constrained vs erm" in again and "Robustness report" in again
    assert again.index("Robustness report") < again.index("Head-to-head") and again.count("data:image/png") == 6
    raw = _load(report / "alpaca_eval" / "gamma_1.5" / "annotations-0.json")
    assert len(raw) == 20 and {(r["output_1"], r["output_2"]) for r in raw[:10]} == {
        (r["output_2"], r["output_1"]) for r in raw[10:]
    }  # both orders shown
    assert "constrained beats erm" in capsys.readouterr().out
    edited = _load(report / "results.json") | {"my_note": "checked by hand"}  # a user's key in a result
    (report / "results.json").write_text(json.dumps(edited))
    with pytest.raises(ValueError, match=r"results\.json was changed since constrained-sft wrote it, and this run "):
        cli(robustness)  # refused before any model loads: the key is never written over
    assert _load(report / "results.json") == edited


def test_lc_reports_why_it_is_missing_instead_of_failing():
    annotations = [{"preference": 2.0, "output_1": "a", "output_2": "bb", "generator_1": "r", "generator_2": "m",
                    "annotator": "offline_test", "instruction": "x"}]  # fmt: skip
    lc, reason = length_controlled(annotations, full_set=False)
    assert lc is None and "805" in reason
    lc, reason = length_controlled(annotations, full_set=True)  # offline: the Hub file cannot be fetched
    assert lc is None and reason.startswith("alpaca_eval could not compute LC")


def test_judge_setup_names_the_annotator_config_or_refuses_a_judge_without_one(tmp_path):
    config, extra = judge_setup(_judge_args(tmp_path, judge="test"))
    assert config.startswith(JUDGE_CONFIGS) and extra == {"fn_completions": offline_test_completions}
    with pytest.raises(JudgeError, match="'proxy' does not run through alpaca_eval's annotator"):
        judge_setup(_judge_args(tmp_path, judge="proxy"))  # an AttributeError before


def _judge_args(tmp_path, **kw):
    return AlpacaArguments(generations=str(tmp_path / "gens"), output_dir=str(tmp_path / "report"), **kw)


def test_judge_input_errors(models, tmp_path, monkeypatch):
    for name in models:
        _generate(models, tmp_path, name)
    erm = tmp_path / "gens" / "erm" / "gamma_0.0.json"
    rows = _load(erm)
    erm.write_text(json.dumps(rows[:-1]))
    with pytest.raises(GenerationError, match="different instruction sets: 1 only in constrained, 0 only in erm"):
        judge(_judge_args(tmp_path, judge="test", gammas=[0.0]))
    erm.write_text(json.dumps([{**rows[0], "output": "  "}] + rows[1:]))
    with pytest.raises(GenerationError, match="1 empty output.*--allow_empty_outputs"):
        judge(_judge_args(tmp_path, judge="test", gammas=[0.0]))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_CLIENT_CONFIG_PATH", raising=False)
    with pytest.raises(JudgeError, match="needs OPENAI_API_KEY or OPENAI_CLIENT_CONFIG_PATH"):
        judge(_judge_args(tmp_path, judge="gpt4"))
    with pytest.raises(JudgeError, match="needs `--judge_model`"):
        judge(_judge_args(tmp_path, judge="local"))
    with pytest.raises(JudgeError, match="allowed are gpt5, gpt4, openai-compatible, local, proxy, test"):
        judge(_judge_args(tmp_path, judge="gpt5-typo"))
    assert not os.path.exists(tmp_path / "report" / "alpaca_eval.json")  # nothing half-written by a refused run
    judge(_judge_args(tmp_path, judge="test", gammas=[0.0], allow_empty_outputs=True))
    assert _load(tmp_path / "report" / "alpaca_eval.json")["levels"][0]["n_verdicts"] == 20


def test_local_judge_runs_a_chat_model_and_reports_unparseable_verdicts(models, tmp_path):
    for name in models:
        _generate(models, tmp_path, name)
    with pytest.raises(JudgeError, match="no parseable verdict on any of the 20 judgements"):  # a random tiny judge
        judge(_judge_args(tmp_path, judge="local", judge_model=models["erm"], gammas=[0.0]))
    raw = _load(tmp_path / "report" / "alpaca_eval" / "gamma_0.0" / "annotations-0.json")
    assert len(raw) == 20 and all(r["preference"] is None for r in raw)


def test_generation_uses_the_recorded_noise_scale(models, tmp_path):
    """Without --sigma_x: the scale the model's training recorded, else the model's own; written to settings.json."""
    import shutil

    from constrained_sft.noise import embedding_sigma

    _generate(models, tmp_path / "own", "erm", max_instances=4)
    own = _load(tmp_path / "own" / "gens" / "erm" / "settings.json")["sigma_x"]
    assert own == pytest.approx(embedding_sigma(tiny_causal_lm("llama", seed=1)))
    trained = tmp_path / "trained"
    shutil.copytree(models["erm"], trained)
    (trained / "constraints.json").write_text(json.dumps({"noise_sigma_x": 0.01}))  # half its own
    recorded = _generate({"erm": str(trained)}, tmp_path / "rec", "erm", max_instances=4)
    assert _load(tmp_path / "rec" / "gens" / "erm" / "settings.json")["sigma_x"] == 0.01
    given = _generate({"erm": str(trained)}, tmp_path / "given", "erm", max_instances=4, sigma_x=0.04)
    assert _load(given[1.5].path) != _load(recorded[1.5].path)  # the scale reached the noise
    with pytest.raises(GenerationError, match="sigma_x` must be a finite number > 0"):
        _generate(models, tmp_path / "bad", "erm", sigma_x=0.0)
