"""benchmarks/study_package.py, the Python of benchmarks/gpu_study.sh, in process: what it packs (results, no
weights), the record device.txt keeps, what `check` refuses, and its questions before any work. The whole script runs
in tests/test_gpu_study.py."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import study_package as package  # noqa: E402 (the scripts' side: benchmarks/, which the library never imports)


def a_study(root):
    """A study folder as a finished study leaves it: results, a run's record files and its weights."""
    (root / "runs").mkdir(parents=True)
    (root / "runs" / "erm-seed0.json").write_text(json.dumps({"seconds": {"train": 1.0}}))
    (root / "robustness").mkdir()
    (root / "robustness" / "results.json").write_text("{}")
    (root / "robustness" / "accuracy_vs_gamma.png").write_bytes(b"png")
    (root / "report.md").write_text("# report")
    (root / "study.json").write_text("{}")
    run = root / "train" / "erm" / "seed0"
    run.mkdir(parents=True)
    (run / "constraints.json").write_text("{}")
    (run / "model.safetensors").write_bytes(b"weights")
    return root


def marked(out):
    """An OUT_DIR as gpu_study.sh starts it: its record names the device (`device`), no file written yet."""
    package.device(str(out), ["cpu", "", "python 3.11"])
    return out


def test_pack_brings_back_results_without_weights_and_records_them(tmp_path, capsys):
    study, out = a_study(tmp_path / "study"), marked(tmp_path / "out")
    package.pack(str(study), str(out))
    with tarfile.open(out / "study.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"runs/erm-seed0.json", "study.json", "report.md", "train/erm/seed0/constraints.json"} <= names
    assert not [n for n in names if n.endswith(".safetensors")]
    shown = ["accuracy_vs_gamma.png", "report.md", "results.json", "study.tar.gz"]
    assert sorted(p.name for p in out.iterdir()) == [".written-by.json", *shown]  # 8 files at most come back
    assert json.loads((out / ".written-by.json").read_text())["device"] == ["cpu", "python 3.11"]
    marked_, record = package.recorded(str(out))
    assert marked_ and set(record) == {"accuracy_vs_gamma.png", "report.md", "results.json", "study.tar.gz"}
    assert "results in" in capsys.readouterr().out
    package.check(str(out))  # the script's own folder, unchanged: accepted, and packed again over
    (out / "study.log").write_text("rewritten by every call")
    package.check(str(out))
    package.pack(str(study), str(out))


def test_pack_makes_out_dir_and_refuses_one_that_is_a_file(tmp_path, capsys):
    study = a_study(tmp_path / "study")
    package.pack(str(study), str(tmp_path / "new" / "out"))  # not there yet: made, as `device` makes it
    assert (tmp_path / "new" / "out" / "study.tar.gz").is_file()
    (tmp_path / "a-file").write_text("mine")
    with pytest.raises(SystemExit) as refused:
        package.pack(str(study), str(tmp_path / "a-file"))
    assert refused.value.code == 2 and (tmp_path / "a-file").read_text() == "mine"
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"gpu_study.sh: error: OUT_DIR {tmp_path / 'a-file'} is a file; give a new or empty folder (or one "
        "gpu_study.sh wrote)"
    )


@pytest.mark.parametrize("change", ["edit", "foreign", "unmarked"])
def test_check_refuses_a_folder_with_files_it_did_not_write(tmp_path, capsys, change):
    study, out = a_study(tmp_path / "study"), marked(tmp_path / "out")
    package.pack(str(study), str(out))
    if change == "edit":
        (out / "report.md").write_text("my notes")
    elif change == "foreign":
        (out / "notes.md").write_text("mine")
    else:
        (out / ".written-by.json").write_text("my device notes\n")
    with pytest.raises(SystemExit) as stop:
        package.check(str(out))
    assert stop.value.code == 2
    assert "holds files gpu_study.sh did not write" in capsys.readouterr().err


def test_a_failed_pack_leaves_no_partial_archive(tmp_path, monkeypatch):
    study, out = a_study(tmp_path / "study"), marked(tmp_path / "out")
    package.pack(str(study), str(out))
    before = (out / "study.tar.gz").read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(tarfile.TarFile, "add", broken)
    with pytest.raises(OSError):
        package.pack(str(study), str(out))
    assert (out / "study.tar.gz").read_bytes() == before
    assert not [n for n in os.listdir(out) if n.startswith(".study.tar.gz")]


def test_an_earlier_versions_out_dir_is_read_through_its_device_txt(tmp_path):
    """An OUT_DIR an earlier version wrote (device.txt: the mark, then "written: <sha256> <name>" lines) is the
    script's: accepted unchanged, packed into (the record then written beside it), refused once a file changed."""
    study, out = a_study(tmp_path / "study"), tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("# an earlier report")
    digest = package.sha256(str(out / "report.md"))
    (out / package.DEVICE).write_text(f"{package.MARK}\ncpu\n{package.WRITTEN}{digest} report.md\n")
    package.check(str(out))
    package.device(str(out), ["cpu"])
    package.pack(str(study), str(out))
    package.check(str(out))  # its record now, device.txt kept as the user's copy of the earlier one
    (out / "report.md").write_text("my notes")
    with pytest.raises(SystemExit):
        package.check(str(out))


def test_the_questions_before_any_work(capsys):
    assert package.main(["attention", "packed", "flex_attention"]) == 0
    assert package.main(["attention", "padded", "paged|eager"]) == 0  # padded batches need no packed-sequence mask
    line = package.versions()
    assert line.startswith("python ") and " torch " in line and " trl " in line
    asked = ((["attention", "packed", "paged|eager"], "ATTN 'paged|eager': give an attention that keeps packed"),
             (["attention", "padded", "flash_attn"], "ATTN 'flash_attn': transformers knows no such attention"),
             (["attention", "padded", "kernels-community/flash-attn"], "needs the `kernels` package"),
             (["attention", "flex_attention"], "usage:"), (["pakc", "a", "b"], "usage:"), ([], "usage:"))  # fmt: skip
    for argv, said in asked:
        with pytest.raises(SystemExit) as stop:
            package.main(argv)
        assert stop.value.code == 2 and said in capsys.readouterr().err


def test_installed_answers_without_importing_the_stack():
    """The script's first question (`installed`): the package is there, asked in a fresh interpreter without importing
    torch or transformers, so a refused argument costs no stack import."""
    program = """
import os, runpy, sys
sys.argv = ["study_package.py", "installed", sys.argv[1]]
sys.path.insert(0, os.path.dirname(sys.argv[-1]))  # as `python benchmarks/study_package.py` starts: its folder first
try:
    runpy.run_path(sys.argv.pop(), run_name="__main__")
except SystemExit as stop:
    assert stop.code == 0, stop.code
loaded = {"torch", "transformers"} & set(sys.modules)
assert not loaded, loaded
"""
    result = subprocess.run(
        [sys.executable, "-c", program, str(BENCHMARKS / "study_package.py")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_script_holds_no_python():
    """Its Python is this module's and constrained_sft.testing's: no heredoc, no `-c` program."""
    script = BENCHMARKS / "gpu_study.sh"
    with open(script, encoding="utf-8") as f:
        text = f.read()
    assert "<<" not in text and not [line for line in text.splitlines() if "PY" in line and " -c " in line]


def test_the_package_brings_back_the_study_folders_parts_but_weights_and_data():
    """`study_package` names the parts it packs by hand (importing `study.study_folder` would load the comparison layer,
    seconds a refused script call should not wait); they are the study folder's parts, less the trained runs (only
    their small files travel), the prepared data and a Slurm study's job ledger and logs (a lent GPU machine has no
    Slurm; a study continued on another cluster finds none of those jobs queued and submits anew)."""
    from constrained_sft.study import study_folder as folder

    assert set(package.FOLDERS) == set(folder.FOLDERS) - {folder.TRAIN, folder.DATA, folder.SLURM}
    assert set(package.FILES) == set(folder.FILES)


def test_an_archive_continues_a_study_only_where_nothing_is_written_over(tmp_path):
    """pack, then unpack: into a new folder (every file back, weights never packed), into the same study missing some
    files (only those extracted, the others left as they are), and never into a folder where one would be replaced."""
    study, out = a_study(tmp_path / "study"), marked(tmp_path / "out")
    (study / "written_by.json").write_text(json.dumps({"commands": {"study": {"settings": {"a": 1}}}}))
    package.pack(str(study), str(out))
    fresh = tmp_path / "fresh"
    package.unpack(str(out / "study.tar.gz"), str(fresh))
    packed = {p.relative_to(study) for p in study.rglob("*") if p.is_file() and p.suffix != ".safetensors"}
    assert {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()} == packed
    (fresh / "report.md").unlink()
    (fresh / "notes.md").write_text("mine")
    stamp = (fresh / "study.json").stat().st_mtime_ns
    package.unpack(str(out / "study.tar.gz"), str(fresh))  # the same study: the missing file back, nothing else
    assert (fresh / "report.md").read_text() == "# report" and (fresh / "notes.md").read_text() == "mine"
    assert (fresh / "study.json").stat().st_mtime_ns == stamp
    (fresh / "report.md").write_text("my edit")
    with pytest.raises(SystemExit):
        package.unpack(str(out / "study.tar.gz"), str(fresh), check_only=False)
    assert (fresh / "report.md").read_text() == "my edit"
