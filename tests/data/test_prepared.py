"""What a data source holds decides its prepared rows (`utils.content`, `data.prepared`): a same-size edit anywhere in
a file or a folder is other data, an id is kept only for the bytes it was computed from, and a prepared folder that
a kill, a full disk or a hand damaged is prepared again with a line saying what was wrong."""

import json
import logging
import os
import shutil

import pytest

from constrained_sft.data import DataArguments, DataError
from constrained_sft.data.prepared import ROWS, data_key, prepared_splits
from constrained_sft.testing import successor_dataset
from constrained_sft.utils.content import content_id, legacy_fingerprint, same_source


def edit_in_place(path, offset: int) -> None:
    """One byte changed at `offset`, the size and the modification time kept (as `touch -r` would restore it)."""
    stat = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(b"9" if byte != b"9" else b"8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.path.getsize(path) == stat.st_size and os.stat(path).st_mtime_ns == stat.st_mtime_ns


def test_a_same_size_edit_in_the_middle_of_a_large_file_is_other_data(tmp_path, monkeypatch):
    monkeypatch.setenv("CONSTRAINED_SFT_CACHE", str(tmp_path / "cache"))
    rows = tmp_path / "rows.jsonl"
    line = json.dumps({"prompt": "s1 s2 =", "completion": " s3 s4"}) + "\n"
    rows.write_text(line * (3 * 2**20 // len(line) + 1))  # > 3 MiB
    args = DataArguments(dataset_name=str(rows))
    key, cid, legacy = data_key(args), content_id(str(rows)), legacy_fingerprint(str(rows))
    assert content_id(str(rows)) == cid and list((tmp_path / "cache" / "content").iterdir())  # kept, then read back
    edit_in_place(rows, rows.stat().st_size // 2 + 3)
    assert content_id(str(rows)) != cid and data_key(args) != key
    assert legacy_fingerprint(str(rows)) == legacy  # what earlier versions keyed on: blind to it
    assert not same_source(cid, str(rows)) and same_source(content_id(str(rows)), str(rows))
    assert same_source(legacy, str(rows))  # an earlier record compared as it can be: through its own fingerprint
    assert not same_source(cid, None)  # a field the data no longer sets (a TypeError from os.stat before)

    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    (folder / "train.jsonl").write_text(line * 10)
    (folder / "sub" / "frames.bin").write_bytes(b"\0" * 4096)
    before = content_id(str(folder))
    edit_in_place(folder / "sub" / "frames.bin", 100)
    assert content_id(str(folder)) != before
    shutil.copytree(folder, tmp_path / "moved")
    assert content_id(str(tmp_path / "moved")) == content_id(str(folder))  # where it lies decides nothing


@pytest.fixture
def source(tmp_path, monkeypatch):
    monkeypatch.setenv("CONSTRAINED_SFT_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "pc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in successor_dataset(40)))
    return DataArguments(dataset_name=str(path), eval_size=8)


@pytest.mark.parametrize(
    "damage, said",
    [
        (lambda w: os.truncate(next(w.glob("train/data-*.arrow")), 64), r"train/data-00000-of-00001.arrow is not the file written"),
        (lambda w: (w / ROWS).write_text('{"train": 3'), f"{ROWS} cannot be read"),
        (lambda w: shutil.rmtree(w / "held_out"), r"held_out/\S+ is missing"),
        (lambda w: (w / ROWS).unlink(), f"left half-written, no {ROWS}"),
    ],
    ids=["arrow-truncated", "rows-json-truncated", "split-missing", "rows-json-missing"],
)  # fmt: skip
def test_a_damaged_prepared_folder_is_prepared_again(source, tmp_path, caplog, damage, said):
    import re

    first = prepared_splits(source, str(tmp_path / "data"))
    rows = (first.train.to_list(), first.held_out.to_list())
    damage(tmp_path / "data" / os.path.basename(first.folder))
    with caplog.at_level(logging.WARNING):
        again = prepared_splits(source, str(tmp_path / "data"))
    assert re.search(f"damaged \\({said}\\); preparing them again", caplog.text), caplog.text
    assert (again.train.to_list(), again.held_out.to_list()) == rows
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        prepared_splits(source, str(tmp_path / "data"))
    assert "reusing the 32 training and 8 held-out rows" in caplog.text and "are damaged" not in caplog.text


def test_an_earlier_versions_prepared_folder_is_checked_by_loading_it(source, tmp_path, caplog):
    first = prepared_splits(source, str(tmp_path / "data"))
    rows_json = os.path.join(first.folder, ROWS)
    with open(rows_json) as f:
        earlier = {k: v for k, v in json.load(f).items() if k != "files"}  # what it wrote: no hashes
    with open(rows_json, "w") as f:
        json.dump(earlier, f)
    with caplog.at_level(logging.WARNING):
        prepared_splits(source, str(tmp_path / "data"))
    assert "reusing" in caplog.text and "are damaged" not in caplog.text


def test_a_prepared_data_folder_that_is_a_file_is_refused(source, tmp_path):
    (tmp_path / "data").write_text("mine")
    with pytest.raises(DataError, match=r"The prepared-data folder \S+data is a file; move it away"):
        prepared_splits(source, str(tmp_path / "data"))
    assert (tmp_path / "data").read_text() == "mine"


def test_only_a_launchs_local_main_process_takes_the_tokenizing_lock(tmp_path):
    """Under `accelerate launch` the other ranks wait for the main one inside TRL's `main_process_first`; a rank
    that held the lock at that barrier kept the main one from it, and the study's two-process launch hung (issue 67).
    With the lock held elsewhere, a non-main rank goes on; the main rank waits for it."""
    import threading

    from constrained_sft.data.prepared import PreparedData, locked

    data = PreparedData([], [], str(tmp_path / "prepared"))  # type: ignore[arg-type]  (the rows are not read)
    entered = {True: threading.Event(), False: threading.Event()}

    def build(local_main: bool) -> None:
        with data.tokenizing(local_main):
            entered[local_main].set()

    with locked(os.path.join(data.folder, "tokenize")):  # held by another process's lock (another file object)
        threads = {main: threading.Thread(target=build, args=(main,), daemon=True) for main in (True, False)}
        for thread in threads.values():
            thread.start()
        assert entered[False].wait(30), "a non-main rank waited for the lock"
        assert not entered[True].wait(1)  # the main rank waits while the lock is held
    assert entered[True].wait(30)  # and goes on once it is released


def test_a_split_name_is_never_read_as_a_path(tmp_path, monkeypatch):
    """`dataset_train_split: train` in a folder that holds a `train/`: the split is a name, not data; only the fields
    that name a source are hashed (was: the folder hashed into the run's identity)."""
    from constrained_sft.tasks.training import data_identity

    data = tmp_path / "rows.jsonl"
    successor_dataset(8).to_json(data)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "notes.jsonl").write_text('{"a": 1}\n')
    identity = data_identity(DataArguments(dataset_name=str(data), dataset_train_split="train"))
    assert identity["files"] == {"dataset_name": content_id(str(data))}


@pytest.mark.parametrize("where", ["file", "in-folder"])
def test_a_named_pipe_as_data_is_refused_not_read_forever(tmp_path, where):
    from constrained_sft.tasks.training import data_identity

    folder = tmp_path / "data"
    folder.mkdir()
    successor_dataset(8).to_json(folder / "train.jsonl")
    pipe = (folder if where == "in-folder" else tmp_path) / "pipe.jsonl"
    os.mkfifo(pipe)
    source = str(folder if where == "in-folder" else pipe)
    args = DataArguments(dataset_name=source)
    for read in (data_identity, lambda a: data_key(a), lambda a: prepared_splits(a, str(tmp_path / "prep"))):
        with pytest.raises(DataError, match=r"`dataset_name` '.*pipe.jsonl' is a named pipe, not a data file"):
            read(args)
