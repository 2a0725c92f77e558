"""What a study measures each trained run with (`study.after_training`): the pieces that need no model."""

import json
from types import SimpleNamespace

import pytest

from constrained_sft.evaluation.alpaca import LevelAnswers
from constrained_sft.study import after_training
from constrained_sft.study.after_training import Evaluation, held_out


def settings(**overrides) -> Evaluation:
    values = dict(
        gammas=[0.0, 1.0], curve_gammas=[0.0, 1.0], train_gamma=0.0, noise_seeds=1, batch_size=2, max_length=64,
        instructions="unused.jsonl", max_instances=None, generation_gammas=[0.0, 1.5], generation_batch_size=2,
        max_new_tokens=8, exit_prompts=0, exit_layers=None, exit_new_tokens=8, bootstrap_samples=10,
    )  # fmt: skip
    return Evaluation(**(values | overrides))


def test_the_held_out_data_is_loaded_once_per_process_for_the_same_rows(monkeypatch):
    """Every run, the probe and the comparison measure the same rows: one load for them, a new one (the old dropped)
    when the data changes."""
    monkeypatch.setattr(after_training, "_HELD_OUT", {})
    loads = []
    task = SimpleNamespace(name="sft", measuring=SimpleNamespace(evaluation_data=lambda a, d: loads.append(a) or [a]))
    first = held_out(task, "alpaca", "study/data")
    assert held_out(task, "alpaca", "study/data") is first and loads == ["alpaca"]
    assert held_out(task, "sharegpt", "study/data") == ["sharegpt"] and loads == ["alpaca", "sharegpt"]
    assert held_out(task, "alpaca", "study/data") is not first and len(loads) == 3  # one data set kept at a time


def test_answers_start_fresh_and_count_the_empty_ones(tmp_path, monkeypatch):
    """A killed call's partial answers in the run's folder are removed before answering; the empty answers are
    counted per level (under heavy noise an empty answer is a result), as `eval generate` returns them."""
    out = tmp_path / "generations"
    (out / "erm-seed0").mkdir(parents=True)
    (out / "erm-seed0" / "gamma_9.0.json").write_text("[]")  # a level this call does not answer
    calls = []

    def generate(args):
        calls.append(args)
        assert not (out / "erm-seed0").exists()  # removed before the model answers
        return {gamma: LevelAnswers(gamma, str(tmp_path / f"answers-{gamma}.json"), 2, 1 if gamma else 0)
                for gamma in args.gammas}  # fmt: skip

    monkeypatch.setattr(after_training, "generate_answers", generate)
    empty = settings().answer("train/erm/seed0", "erm-seed0", str(out), 0.5)
    assert empty == {"0.0": 0, "1.5": 1}
    (args,) = calls
    assert (args.model, args.name, args.sigma_x, args.gammas, args.max_new_tokens) == (
        "train/erm/seed0", "erm-seed0", 0.5, [0.0, 1.5], 8,
    )  # fmt: skip


def test_the_exit_decoding_reads_the_first_exit_prompts(tmp_path):
    rows = [{"instruction": f"q{i}", "reference": f"a{i}"} for i in range(5)]
    path = tmp_path / "instructions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    e = settings(instructions=str(path), exit_prompts=2, max_instances=4)
    assert [r["instruction"] for r in e.exit_rows()] == ["q0", "q1"]
    assert e.instruction_count == 4
    args = e.exits_arguments(str(tmp_path / "exits"), ["m"], ["erm"], None)
    assert (args.max_instances, args.gammas, args.max_new_tokens) == (2, [0.0, 1.5], 8)


def test_a_run_is_measured_at_the_studys_scale_else_its_recorded_one_else_refused(tmp_path):
    """sigma_x: the study's (the recipe's `noise_sigma`), else what the run's training recorded; a run that recorded
    none (trained by an older version) is refused naming its folder, not measured at its own trained scale."""
    run = tmp_path / "train" / "erm" / "seed0"
    run.mkdir(parents=True)
    assert settings(sigma_x=0.5).run_sigma(str(run)) == 0.5
    with pytest.raises(ValueError, match=f"{run}: its constraints.json records no noise_sigma_x"):
        settings().run_sigma(str(run))
    (run / "constraints.json").write_text(json.dumps({"noise_sigma_x": 0.0123}))
    assert settings().run_sigma(str(run)) == 0.0123


def test_compiled_decoding_reaches_the_answers_and_the_exits(tmp_path, monkeypatch):
    """`study --compile_decoding true` is `eval generate --compile true` and `eval exits --compile true` for every
    run; the study's settings leave it out (the same greedy tokens, like `--jobs`)."""
    from constrained_sft.study.arguments import StudyArguments
    from constrained_sft.study.plan import evaluation_settings

    calls = []
    monkeypatch.setattr(after_training, "generate_answers", lambda args: calls.append(args) or {})
    for flag in (False, True):
        e = settings(compile_decoding=flag)
        e.answer("train/erm/seed0", "erm-seed0", str(tmp_path / "generations"), 0.5)
        assert calls[-1].compile is flag and e.exits_arguments(str(tmp_path), ["m"], ["erm"], None).compile is flag
    o = StudyArguments(compile_decoding=True)
    recipe = SimpleNamespace(training=SimpleNamespace(noise_gamma=0.0, per_device_eval_batch_size=2, max_length=64,
                                                      noise_sigma=None))  # fmt: skip
    assert evaluation_settings(o, recipe, "unused.jsonl").compile_decoding is True
    assert "compile_decoding" not in o.folder_settings({})
