"""The one atomic writer (`utils.atomic.replacing`): the old file or the new one, never half of one."""

import os
from pathlib import Path

import pytest

from constrained_sft.utils.atomic import replacing, replacing_folder


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), replacing(str(path)) as tmp:
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["results.json"]
    with replacing(str(path)) as tmp, open(tmp, "w") as f:
        f.write("new")
    assert path.read_text() == "new" and os.listdir(tmp_path) == ["results.json"]


def test_each_writer_gets_its_own_temporary_unless_the_name_is_fixed(tmp_path):
    path = str(tmp_path / "marker.json")
    with replacing(path) as first, replacing(path) as second:  # two processes marking one folder at once
        assert first != second and os.path.dirname(first) == str(tmp_path)
        for tmp in (first, second):
            with open(tmp, "w") as f:
                f.write(os.path.basename(tmp))
    assert Path(path).read_text() == os.path.basename(first)  # the last to finish wins, whole
    with replacing(path, f"{path}.tmp", destination=lambda p, t: p + ".new", after=print) as tmp, open(tmp, "w") as f:
        f.write("beside")
    assert tmp == f"{path}.tmp" and Path(f"{path}.new").read_text() == "beside"


def test_a_folder_is_replaced_whole_and_a_failed_one_leaves_the_old(tmp_path):
    target = tmp_path / "model"
    with replacing_folder(str(target)) as tmp:  # absent before: one rename
        (Path(tmp) / "config.json").write_text("1")
    assert (target / "config.json").read_text() == "1"
    with pytest.raises(RuntimeError), replacing_folder(str(target)) as tmp:
        (Path(tmp) / "config.json").write_text("half")
        raise RuntimeError("killed mid-write")
    assert (target / "config.json").read_text() == "1"  # the old folder, untouched
    with replacing_folder(str(target)) as tmp:
        (Path(tmp) / "weights").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["weights"]  # the new folder whole, nothing of the old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary, no old folder left beside it
