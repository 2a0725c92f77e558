"""`benchmarks/study_package.py unpack` (gpu_check.sh's STUDY_TGZ): the whole archive checked before anything is
written, against the layout `pack` writes and against links in STUDY_DIR; each refusal one line naming the member and
why, STUDY_DIR as it was."""

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import study_archive as archive  # noqa: E402 (the scripts' side: benchmarks/, which the library never imports)

RECORD = json.dumps({"by": "constrained-sft", "files": {}, "commands": {"study": {"settings": {"a": 1}}}})


def an_archive(path: Path, members: dict[str, str | None]) -> str:
    """A gzipped tar of `members` ({name: text, or None for a folder}), the study's record first."""
    with tarfile.open(path, "w:gz") as tar:
        for name, text in {".written-by.json": RECORD, **members}.items():
            info = tarfile.TarInfo(name)
            if text is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                data = text.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


def refusal(capsys, *args) -> str:
    with pytest.raises(SystemExit) as stop:
        archive.unpack(*args)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_layout_is_what_pack_writes():
    assert archive.in_layout(["runs", "erm-seed0.json"], False) and archive.in_layout(["runs"], True)
    assert archive.in_layout(["train", "erm", "seed0", "run.json"], False) and archive.in_layout(["train"], True)
    assert archive.in_layout(["report.md"], False) and archive.in_layout([], True)
    assert not archive.in_layout(["notes.txt"], False) and not archive.in_layout(["report.md"], True)
    assert not archive.in_layout(["train", "erm", "seed0", "model.safetensors"], False)
    assert not archive.in_layout(["data", "rows.arrow"], False)


def test_members_outside_the_layout_are_refused_before_anything_is_written(tmp_path, capsys):
    """The probe's archive: a study's files, then notes.txt and 20,000 members elsewhere: refused at notes.txt,
    STUDY_DIR never made."""
    junk = {f"junk/{i}.txt": "x" for i in range(20_000)}
    tgz = an_archive(tmp_path / "study.tar.gz", {"report.md": "# report", "notes.txt": "mine", **junk})
    line = refusal(capsys, tgz, str(tmp_path / "study"))
    assert "its member 'notes.txt' is outside a study's layout (its result folders runs, robustness" in line, line
    assert line.startswith("gpu_check.sh: error: STUDY_TGZ ") and "give the study.tar.gz" in line
    assert not (tmp_path / "study").exists()


def test_a_member_named_twice_is_refused(tmp_path, capsys):
    tgz = tmp_path / "study.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        for text in (RECORD, RECORD, "{}"):
            info = tarfile.TarInfo(".written-by.json" if text == RECORD else "./.written-by.json")
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
    line = refusal(capsys, str(tgz), str(tmp_path / "study"))
    assert "its member '.written-by.json' is named twice (the second would replace the first)" in line, line


def test_a_member_through_a_link_in_the_folder_is_refused_naming_both(tmp_path, capsys):
    """STUDY_DIR holds the same study, its `runs` a link to a folder elsewhere: nothing is written there or in
    STUDY_DIR (tarfile's own filter would refuse only once it came to that member, after the files before it)."""
    tgz = an_archive(tmp_path / "study.tar.gz", {"report.md": "# report", "runs/erm-seed0.json": "{}"})
    study, elsewhere = tmp_path / "study", tmp_path / "elsewhere"
    study.mkdir()
    elsewhere.mkdir()
    (study / ".written-by.json").write_text(RECORD)
    (study / "runs").symlink_to(elsewhere)
    before = files(study)
    line = refusal(capsys, tgz, str(study))
    assert f"STUDY_DIR {study}: {study / 'runs'} is a link, and STUDY_TGZ's member 'runs/erm-seed0.json'" in line
    assert "nothing is written" in line
    assert files(study) == before and not list(elsewhere.iterdir())


def test_the_script_refuses_in_one_line(tmp_path):
    tgz = an_archive(tmp_path / "study.tar.gz", {"train/erm/seed0/model.safetensors": "weights"})
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "study_package.py"), "unpack", "--check", tgz, str(tmp_path / "study")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "'train/erm/seed0/model.safetensors' is outside" in done.stderr


def test_the_h100_windows_hand_packed_archive_is_a_study_archive(tmp_path):
    """The archive the H100 window left (../shared/gpu/h100-seed0): names under "./", an earlier version's marker and
    each run's small files beside the ones pack writes (its model card, tokenizer, config); unpacked whole."""
    legacy = json.dumps({"commands": {"study": {"settings": {"a": 1}}}})
    run = {f"./train/erm/seed0/{n}": "{}" for n in (*archive.RUN_FILES, *archive.LEGACY_RUN_FILES)}
    tgz = tmp_path / "study-partial.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        for name, text in {"./": None, "./written_by.json": legacy, "./generations/erm-seed0/gamma_0.0.json": "[]",
                           **run}.items():  # fmt: skip
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE if text is None else tarfile.REGTYPE
            info.size = 0 if text is None else len(text)
            tar.addfile(info, None if text is None else io.BytesIO(text.encode()))
    archive.unpack(str(tgz), str(tmp_path / "study"))
    assert (tmp_path / "study" / "train" / "erm" / "seed0" / "README.md").is_file()
    assert (tmp_path / "study" / "written_by.json").read_text() == legacy
