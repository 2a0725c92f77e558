"""A study's own files are checked before any work (the previous release's study, `tests/fixtures/previous_release/`,
each time damaged one way): a run record of the wrong shape, one saying a phase is done without its measurement, one
of another run or of other weights, and a file where the study keeps a folder are refused in one line naming the
file and the field, with exit status 2, and every file of the study is byte-for-byte what it was."""

import hashlib
import json
import re
import shutil

import pytest
from test_previous_release import STUDY, previous  # noqa: F401 - the fixture, shared

from constrained_sft.cli import console


def record(folder, name="erm-seed0", **change):
    path = folder / "runs" / f"{name}.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, **change}))


def weights_of_another_study(study):
    """The run's folder holding weights its record was not measured on (the record copied from another study)."""
    for name in ("model.safetensors", "config.json"):
        shutil.copy(study.parent / "model" / name, study / "train" / "erm" / "seed0" / name)


CASES = {
    "record-field-kind": (lambda s: record(s, jobs="two"), r"runs/erm-seed0.json: `jobs` must be \{phase: runs at once\}, got 'two'"),
    "record-unknown-phase": (lambda s: record(s, seconds={"fly": 1.0}), r"runs/erm-seed0.json: `seconds` must be \{phase: seconds\} with phases of \['train', 'robustness', 'answers', 'exits'\]"),
    "record-done-without-result": (lambda s: record(s, robustness=None), r"runs/erm-seed0.json: the phase `robustness` is recorded as done but `robustness` is null; delete the record"),
    "record-result-unreadable": (lambda s: record(s, robustness={"path": 1}), r"runs/erm-seed0.json: `robustness` is not a measurement this version reads"),
    "record-of-another-run": (lambda s: record(s, run="constrained/seed0"), r"runs/erm-seed0.json is the record of 'constrained/seed0', not of 'erm/seed0'"),
    "record-not-json": (lambda s: (s / "runs" / "erm-seed0.json").write_text('{"run": "erm/seed0", "seconds": {'), r"runs/erm-seed0.json:1:\d+: not valid JSON"),
    "record-a-list": (lambda s: (s / "runs" / "erm-seed0.json").write_text("[]"), r"runs/erm-seed0.json holds a list, not a run record"),
    "record-of-another-study": (lambda s: record(s, study="f" * 32), r"runs/erm-seed0.json: `study` f{32} is not this study's id \(none: its study-id.txt is gone\): a record of another study's run"),
    "study-id-damaged": (lambda s: (s / "study-id.txt").write_text("mine"), r"study/study-id.txt holds 'mine', not a study id"),
    "record-of-other-weights": (weights_of_another_study, r"runs/erm-seed0.json: `model` \w+ is not the fingerprint of the weights in study/train/erm/seed0"),
    "data-a-file": (lambda s: (s / "data").write_text("mine"), r"study/data is a file where the study keeps its `data` folder"),
    "runs-a-file": (lambda s: (shutil.rmtree(s / "runs"), (s / "runs").write_text("mine")), r"study/runs is a file where the study keeps its `runs` folder"),
    "study-json-a-folder": (lambda s: (s / "study.json").mkdir(), r"study/study.json is a folder where the study writes its study.json"),
    "timings-damaged": (lambda s: (s / "timings.json").write_text('{"train": '), r"timings.json:1:\d+: not valid JSON"),
}  # fmt: skip


def snapshot(root):
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir" for p in root.rglob("*")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_study_file_is_refused_before_any_work(case, previous, capsys):  # noqa: F811
    damage, message = CASES[case]
    damage(previous / "study")
    before = snapshot(previous)
    assert console(STUDY) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("constrained-sft: error:")]
    assert len(lines) == 1, err[-2000:]
    assert re.search(message, lines[0]), lines[0]
    assert snapshot(previous) == before
