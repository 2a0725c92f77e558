"""A study's vocabulary (`study.record`): a run's key, its record written phase by phase, records of earlier versions,
and a record that is not its file's run refused."""

import json
import os
from pathlib import Path

import pytest

from constrained_sft.study.record import RunKey, RunRecord, read_run_record, write_run_record
from constrained_sft.study.study_folder import StudyFolder


def test_a_run_key_names_its_run_folder_and_record(tmp_path):
    run = RunKey(1, "early-exit")
    assert run.name == "early-exit/seed1" and RunKey.parse(run.name) == run and run.stem == "early-exit-seed1"
    assert run.folder(str(tmp_path)) == str(tmp_path / "train" / "early-exit" / "seed1")
    assert StudyFolder(str(tmp_path)).record(run) == str(tmp_path / "runs" / "early-exit-seed1.json")
    assert StudyFolder(str(tmp_path)).run(run) == run.folder(str(tmp_path))
    assert run.folder(str(tmp_path), "final") == str(tmp_path / "final" / "early-exit" / "seed1")  # a sweep's
    assert sorted([RunKey(1, "a"), RunKey(0, "b"), RunKey(0, "a")]) == [RunKey(0, "a"), RunKey(0, "b"), RunKey(1, "a")]
    with pytest.raises(ValueError, match="not a run name"):
        RunKey.parse("erm-seed0")


def test_a_record_grows_phase_by_phase_and_reads_back(tmp_path):
    record = RunRecord("erm/seed0")
    record.seconds["train"], record.estimates["train"], record.jobs["train"] = 12.5, 14.0, 2
    write_run_record(StudyFolder(str(tmp_path)), record, "accuracy")
    again = read_run_record(StudyFolder(str(tmp_path)), RunKey(0, "erm"), "accuracy")
    assert again == record and again.done("train") and not again.done("robustness")


def test_a_record_of_an_earlier_version_loads_as_its_phases(tmp_path):
    """Records written whole (every phase at once) had `generation` and `total` seconds and no estimates."""
    (tmp_path / "runs").mkdir()
    old = {"run": "erm/seed1", "sigma_x": 0.5, "model": "abc", "robustness": None, "exits": None,
           "seconds": {"train": 10.0, "generation": 3.0, "total": 15.0}}  # fmt: skip
    (tmp_path / "runs" / "erm-seed1.json").write_text(json.dumps(old))
    record = read_run_record(StudyFolder(str(tmp_path)), RunKey(1, "erm"), "accuracy")
    assert record.seconds == {"train": 10.0, "answers": 3.0} and record.estimates == {}


@pytest.mark.parametrize(
    "change, said",
    [
        ({"sigma_x": "0.5"}, "`sigma_x` must be a number or null, got '0.5'"),
        ({"seconds": {"train": "ten"}}, r"`seconds` must be \{phase: seconds\}"),
        ({"seconds": {"train": 1.0, "exits": 2.0}}, "the phase `exits` is recorded as done but `exits` is null"),
        ({"empty_answers": [0]}, r"`empty_answers` must be \{gamma: count\} or null"),
        ({"run": None}, r"`run` must be a run name \(arm/seedN\), got None"),
    ],
)
def test_a_record_is_checked_before_it_is_trusted(tmp_path, change, said):
    from constrained_sft.study.record import RecordError

    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "erm-seed0.json").write_text(json.dumps({"run": "erm/seed0", "seconds": {}, **change}))
    with pytest.raises(RecordError, match=r"erm-seed0.json: " + said):
        read_run_record(StudyFolder(str(tmp_path)), RunKey(0, "erm"), "accuracy")


def test_a_record_of_another_run_is_refused_naming_both(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "erm-seed0.json").write_text(json.dumps({"run": "constrained/seed0", "seconds": {}}))
    with pytest.raises(ValueError, match=r"erm-seed0.json is the record of 'constrained/seed0', not of 'erm/seed0'"):
        read_run_record(StudyFolder(str(tmp_path)), RunKey(0, "erm"), "accuracy")


def test_only_the_writing_process_writes_a_runs_record(tmp_path):
    """Under `accelerate launch` every process trains the run and only the main one writes its record
    (`Job.writes`); two renaming the same temporary file failed the launch with a FileNotFoundError (issue 67)."""
    from constrained_sft.study.phases import Job, run_job
    from constrained_sft.tasks.training import DONE

    study, run = StudyFolder(str(tmp_path)), RunKey(0, "erm")
    os.makedirs(study.run(run))
    open(os.path.join(study.run(run), DONE), "w").close()  # finished: nothing trains, the phase is recorded
    other = run_job(Job(study, "sft", run, None, None, writes=False))  # type: ignore[arg-type]  (never read)
    assert other.done("train") and not os.path.exists(study.record(run))
    main = run_job(Job(study, "sft", run, None, None))  # type: ignore[arg-type]
    assert read_run_record(study, run, "mean_token_accuracy") == main


def test_a_record_copied_from_another_study_is_refused_without_weights_to_fingerprint(tmp_path):
    """`--keep_models none` leaves no weights, so the fingerprint check cannot tell; the study's own id can."""
    from constrained_sft.study.record import RecordError

    mine, theirs = StudyFolder(str(tmp_path / "mine")), StudyFolder(str(tmp_path / "theirs"))
    for study in (mine, theirs):
        os.makedirs(study.root)
        assert study.identity() is None and len(study.identity(create=True)) == 32
        assert study.identity(create=True) == study.identity()  # drawn once
    assert mine.identity() != theirs.identity()
    record = RunRecord("erm/seed0", model="0123abcd")
    record.seconds["train"] = 1.0
    write_run_record(theirs, record, "accuracy")
    copied = Path(theirs.record(RunKey(0, "erm"))).read_text()
    assert json.loads(copied)["study"] == theirs.identity()
    Path(mine.record(RunKey(0, "erm"))).parent.mkdir()
    Path(mine.record(RunKey(0, "erm"))).write_text(copied)  # copied by hand; no weights in either run folder
    assert read_run_record(theirs, RunKey(0, "erm"), "accuracy").seconds == {"train": 1.0}
    with pytest.raises(
        RecordError, match=r"`study` [0-9a-f]{32} is not this study's id \([0-9a-f]{32}\): a record of another"
    ):
        read_run_record(mine, RunKey(0, "erm"), "accuracy")
