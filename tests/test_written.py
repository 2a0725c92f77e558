"""One rule for every folder the library writes (`utils.written_record`): what it wrote is recorded file by file, and a file
that is not as it wrote it (the user's edit, the user's own file at its name, a `.written-by.json` that is not its
record) is never written over: refused before any work, or, when it changes while a command runs, kept with the run's
version beside it."""

import json
import os

import pytest

from constrained_sft.cli import console
from constrained_sft.utils.content import sha256
from constrained_sft.utils.files import write_json
from constrained_sft.utils.written_record import RECORD, RecordError, check_record, destination, foreign, recording

pytest.importorskip("alpaca_eval")


def alpaca_folder(tmp_path) -> tuple[list[str], object]:
    """`eval alpaca --judge test` on two generators' answers; its argv and report folder."""
    gens = tmp_path / "gens"
    for name in ("constrained", "erm"):
        (gens / name).mkdir(parents=True)
        rows = [{"instruction": f"task {i}", "output": f"{name} answer {i}" * (1 + i % 2), "generator": name,
                 "dataset": "toy"} for i in range(4)]  # fmt: skip
        (gens / name / "gamma_0.0.json").write_text(json.dumps(rows))
    out = tmp_path / "report"
    return ["eval", "alpaca", "--generations", str(gens), "--judge", "test", "--output_dir", str(out)], out


def test_a_key_added_by_hand_to_a_result_is_never_written_over(tmp_path, capsys):
    argv, out = alpaca_folder(tmp_path)
    assert console(argv) == 0
    record = json.loads((out / RECORD).read_text())
    assert record["by"] == "constrained-sft" and {"alpaca_eval.json", "report.html"} <= set(record["files"])
    assert not record.get("pending") and any(name.startswith("alpaca_eval/gamma_0.0/") for name in record["files"])
    assert console(argv) == 0  # the same command again: its own files, as written, rewritten
    edited = json.loads((out / "alpaca_eval.json").read_text()) | {"my_note": "judged by hand too"}
    (out / "alpaca_eval.json").write_text(json.dumps(edited))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert console(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "alpaca_eval.json was changed since constrained-sft wrote it" in err, err
    assert "move your version away" in err and before == {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}


@pytest.mark.parametrize("kind", ["not-ours", "folder", "other-writer"])
def test_a_written_by_record_that_is_not_ours_is_refused_before_any_work(tmp_path, capsys, kind):
    argv, out = alpaca_folder(tmp_path)
    assert console(argv) == 0
    (out / RECORD).unlink()
    if kind == "folder":
        (out / RECORD).mkdir()
    else:
        (out / RECORD).write_text('{"by": "gpu_bundle.py", "files": {}}' if kind == "other-writer" else "my notes\n")
    before = sorted(p.name for p in out.iterdir())
    assert console(argv) == 2
    err = capsys.readouterr().err
    said = {"not-ours": "not JSON of its shape", "folder": "is a folder", "other-writer": "says gpu_bundle.py wrote"}
    assert said[kind] in err and "move it away" in err and sorted(p.name for p in out.iterdir()) == before
    if kind == "not-ours":
        assert (out / RECORD).read_text() == "my notes\n"


def test_a_file_changed_while_a_command_writes_is_kept_and_the_result_goes_beside(tmp_path, capsys):
    folder = tmp_path / "results"
    with recording(str(folder)):
        folder.mkdir()
        write_json(str(folder / "results.json"), {"a": 1})
        (folder / "results.json").write_text('{"a": 1, "mine": true}')  # edited meanwhile
        write_json(str(folder / "results.json"), {"a": 2})
        (folder / "notes.json").write_text("mine\n")  # the user's, at a name the command then writes
        write_json(str(folder / "notes.json"), {"b": 1})
    assert json.loads((folder / "results.json").read_text()) == {"a": 1, "mine": True}
    assert json.loads((folder / "results.new.json").read_text()) == {"a": 2}
    assert (folder / "notes.json").read_text() == "mine\n" and (folder / "notes.new.json").exists()
    printed = capsys.readouterr().out
    assert "results.json is not as constrained-sft wrote it (changed since?): kept" in printed
    with pytest.raises(RecordError, match="results.json .*was changed since constrained-sft wrote it"):
        check_record(str(folder), "--output_dir")


def test_a_kill_between_the_record_and_the_rename_leaves_a_file_the_record_vouches_for(tmp_path):
    """The new file's hash is recorded as pending before the rename: killed before it, the old file is still the
    record's; killed after it (before the pending hash became the written one), the new one is."""
    folder = tmp_path / "results"
    with recording(str(folder)):
        folder.mkdir()
        write_json(str(folder / "results.json"), {"a": 1})
        tmp = folder / "results.json.tmp"
        tmp.write_text('{"a": 2}')
        destination(str(folder / "results.json"), str(tmp))  # the kill comes here, before os.replace
    check_record(str(folder), "--output_dir")  # the old file: as recorded
    os.replace(tmp, folder / "results.json")  # or here, after it
    check_record(str(folder), "--output_dir")
    pending = json.loads((folder / RECORD).read_text())["pending"]
    assert pending == {"results.json": sha256(str(folder / "results.json"))}


def test_a_users_record_file_is_never_taken_for_the_scripts_record(tmp_path):
    """A script's folder holding only a `.written-by.json` of the user's: that file is what the folder holds that the
    script did not write, so the folder is not the script's to replace."""
    (tmp_path / RECORD).write_text("my notes\n")
    assert foreign(str(tmp_path), "gpu_bundle.py") == [RECORD]


@pytest.mark.parametrize("kind", ["folder", "not-ours"])
def test_training_refuses_a_written_by_record_that_is_not_ours_before_any_step(tmp_path, capsys, kind):
    """Was: a `.written-by.json` folder ended training with IsADirectoryError and no weights saved; a user's file of
    that name was replaced by the card's record."""
    from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

    tiny_causal_lm("llama").save_pretrained(tmp_path / "model")
    tiny_tokenizer().save_pretrained(tmp_path / "model")
    successor_dataset(24).to_json(tmp_path / "data.jsonl")
    out = tmp_path / "out"
    out.mkdir()
    (out / RECORD).mkdir() if kind == "folder" else (out / RECORD).write_text("mine\n")
    capsys.readouterr()
    argv = ["train", "--model_name_or_path", str(tmp_path / "model"), "--dataset_name", str(tmp_path / "data.jsonl"),
            "--output_dir", str(out), "--max_steps", "1", "--use_cpu", "true", "--bf16", "false", "--report_to",
            "none"]  # fmt: skip
    assert console(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("constrained-sft: error: `output_dir`") and RECORD in err and err.count("\n") == 0, err
    assert sorted(p.name for p in out.iterdir()) == [RECORD]
