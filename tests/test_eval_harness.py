"""The hand-run harness in eval/: every settings file is valid, and one run generates and judges end to end."""

import glob
import json
import os
import subprocess
import sys

import pytest

from constrained_sft.testing import SYMBOLS, tiny_causal_lm, tiny_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "eval", "alpaca"))
import run as harness  # noqa: E402

SETTINGS = sorted(glob.glob(os.path.join(ROOT, "eval", "alpaca", "*.yaml")))


@pytest.mark.parametrize("path", SETTINGS, ids=os.path.basename)
def test_every_settings_file_is_valid(path):
    with open(path) as f:
        assert f.readline().startswith("# python eval/alpaca/run.py --config eval/alpaca/")  # its command first
    generators, template, judging = harness.check(harness.parse(["--config", path]))
    assert {judging.model, judging.reference} <= set(generators) and judging.gammas == template.gammas
    if not template.instructions.startswith("tatsu-lab/"):
        assert os.path.isfile(os.path.join(ROOT, template.instructions))


def test_bad_settings_name_the_key(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("generators: {a: x, b: y}\nmodel: a\nreference: c\noutput_dir: o\n")
    with pytest.raises(harness.SettingsError, match=r"`reference` is 'c', not one of the generators \['a', 'b'\]"):
        harness.check(harness.parse(["--config", str(path)]))
    with pytest.raises(harness.SettingsError, match=r"unknown settings \['judges'\]; allowed keys: .*'judge'"):
        harness.check(harness.parse(["--config", str(path), "--reference", "b", "--judges", "test"]))


def test_one_run_generates_every_level_then_judges(tmp_path):
    pytest.importorskip("alpaca_eval")
    generators = {}
    for name, seed in (("constrained", 0), ("erm", 1)):
        tiny_causal_lm("llama", seed=seed).save_pretrained(tmp_path / name)
        tiny_tokenizer().save_pretrained(tmp_path / name)
        generators[name] = str(tmp_path / name)
    instructions = tmp_path / "instructions.jsonl"
    instructions.write_text(
        "".join(json.dumps({"instruction": " ".join(SYMBOLS[i : i + 3])}) + "\n" for i in range(6))
    )
    settings = tmp_path / "settings.yaml"
    settings.write_text(
        json.dumps(
            {
                "generators": generators,
                "model": "constrained",
                "reference": "erm",
                "output_dir": str(tmp_path / "out"),
                "instructions": str(instructions),
                "gammas": [0.0, 1.5],
                "max_new_tokens": 4,
                "batch_size": 3,
                "judge": "local",
                "allow_empty_outputs": True,  # a tiny random model may answer nothing under noise: judged, not refused
            }
        )  # fmt: skip
    )
    script = os.path.join(ROOT, "eval", "alpaca", "run.py")
    done = subprocess.run(
        [sys.executable, script, "--config", str(settings), "--judge", "test"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "gamma=0.0: constrained beats erm" in done.stdout and "gamma=1.5: constrained beats erm" in done.stdout
    for name in generators:
        for gamma in (0.0, 1.5):
            assert len(json.loads((tmp_path / "out" / "generations" / name / f"gamma_{gamma}.json").read_text())) == 6
    settings = [json.loads((tmp_path / "out" / "generations" / n / "settings.json").read_text()) for n in generators]
    assert settings[0]["sigma_x"] == settings[1]["sigma_x"]  # one noise scale, though the two models' own differ
    result = json.loads((tmp_path / "out" / "alpaca_eval.json").read_text())
    assert [r["gamma"] for r in result["levels"]] == [0.0, 1.5] and result["judge"] == "test"
    assert all(r["n_verdicts"] + r["unparsed"] == 12 for r in result["levels"])  # 6 pairs, both orders
    assert os.path.isfile(tmp_path / "out" / "report.html")
