"""
Local data files (.json, .jsonl, .parquet, .csv, or a folder of them) read as a `DatasetDict`, with the file, line and
column named when a file is not what its extension says: undecodable text, a malformed JSON line, a .json file that
holds one object instead of rows.
"""

from __future__ import annotations

import json
import os
import stat

from datasets import DatasetDict, IterableDataset, IterableDatasetDict, load_dataset

from .errors import DataError

LOCAL_LOADERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}
SOURCE_FIELDS = ("dataset_name", "video_source")  # the data fields that may name a local file or folder


def check_regular(path: str, flag: str = "dataset_name") -> None:
    """A local source (`path`, a file or a folder) holds regular files only: a named pipe, a socket or a device would
    block the first read (its content id, its rows) or never end. Refused in one line naming `flag`."""
    entries = (
        [os.path.join(root, f) for root, _, files in os.walk(path) for f in files] if os.path.isdir(path) else [path]
    )
    for entry in entries:
        mode = os.stat(entry).st_mode if os.path.exists(entry) else 0  # a link followed; a dangling one: its loader's
        if mode and not stat.S_ISREG(mode):
            kind = "a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
            raise DataError(
                f"`{flag}` {entry!r} is {kind}, not a data file: reading it would wait for a writer or never end; "
                "give a regular file (or a folder of them)."
            )


def load_local(path: str, streaming: bool = False) -> DatasetDict:
    check_regular(path)
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if os.path.splitext(f)[1] in LOCAL_LOADERS)
        if not files:
            raise DataError(f"Folder {path!r} holds no {sorted(LOCAL_LOADERS)} file.")
        by_split: dict[str, list[str]] = {}
        for f in files:  # train.jsonl / test.jsonl become splits; anything else is training data
            stem = os.path.splitext(os.path.basename(f))[0]
            by_split.setdefault(stem if stem in ("train", "test", "validation", "eval") else "train", []).append(f)
        kinds = {LOCAL_LOADERS[os.path.splitext(f)[1]] for f in files}
        if len(kinds) > 1:
            raise DataError(f"Folder {path!r} mixes file types {sorted(kinds)}; keep one.")
        if streaming and all(f.endswith(".jsonl") for f in files):
            return IterableDatasetDict({split: streamed_jsonl(paths) for split, paths in by_split.items()})
        for f in files:
            if not streaming:  # it reads the whole file: a stream's rows are checked as they are read
                check_text_file(f)
        try:
            return load_dataset(kinds.pop(), data_files=by_split, streaming=streaming)
        except Exception as e:  # pyarrow errors the text check cannot see (a column of mixed types, a parquet file)
            raise DataError(f"`dataset_name` {path!r}: could not read its files ({e}).") from e
    ext = os.path.splitext(path)[1]
    if ext not in LOCAL_LOADERS:
        raise DataError(f"`dataset_name` {path!r}: unsupported data file; use one of {sorted(LOCAL_LOADERS)}.")
    if streaming and ext == ".jsonl":
        return IterableDatasetDict({"train": streamed_jsonl([path])})
    if not streaming:  # it reads the whole file: a stream's rows are checked as they are read
        check_text_file(path)
    try:
        return load_dataset(LOCAL_LOADERS[ext], data_files={"train": path}, streaming=streaming)
    except Exception as e:  # pyarrow errors the text check cannot see (a column of mixed types, a parquet file)
        raise DataError(
            f"`dataset_name` {path!r}: could not read it as {LOCAL_LOADERS[ext]} ({e}); it must hold rows, one object "
            "per training example."
        ) from e


def check_text_file(path: str) -> None:
    """
    One read and parse of a text data file before the loader sees it: raise [`DataError`] naming the file, line and
    column of the first undecodable or malformed line (.jsonl: every line one JSON object; .json: one document of
    rows, a list of objects, or columns, an object of lists, not one object the loader would read as one row; .csv:
    UTF-8).
    """
    ext = os.path.splitext(path)[1]
    if ext not in (".json", ".jsonl", ".csv"):
        return
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        number = raw[: error.start].count(b"\n") + 1
        raise DataError(
            f"`dataset_name` {path}:{number}: not UTF-8 text ({error.reason} at byte {error.start})."
        ) from None
    if ext == ".json":
        try:
            top = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataError(
                f"`dataset_name` {path}:{error.lineno}:{error.colno}: not valid JSON ({error.msg})."
            ) from None
        if isinstance(top, dict) and not all(isinstance(v, list) for v in top.values()):
            raise DataError(
                f"`dataset_name` {path}: the top level is one object (keys {sorted(top)[:6]}); a .json data file holds "
                'a list of rows, [{"prompt": ..., "completion": ...}, ...], or columns of equal length, '
                '{"prompt": [...]}.'
            )
    elif ext == ".jsonl":
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                jsonl_row(path, number, line)


def jsonl_row(path: str, number: int, line: str) -> dict:
    """Line `number` of a .jsonl file as its row, refused naming the file, line and column unless one JSON object."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise DataError(
            f"`dataset_name` {path}:{number}:{error.colno}: not a JSON object ({error.msg}); a .jsonl file holds one JSON "
            "object per line."
        ) from None
    if not isinstance(row, dict):
        raise DataError(
            f"`dataset_name` {path}:{number}: a {type(row).__name__}, not a JSON object; a .jsonl file holds one object "
            "(one row) per line."
        )
    return row


def streamed_jsonl(paths: list[str]) -> IterableDataset:
    """A stream of the rows of .jsonl files, read line by line as training asks for them (datasets' own JSON stream
    fails on a malformed line with a message naming no file or line, and casts every file to the first one's columns;
    here a bad line is refused as `jsonl_row` words it, and each row keeps its own columns, checked by the format)."""

    def rows(paths: list[str]):
        for path in paths:
            with open(path, encoding="utf-8", errors="strict") as f:
                try:
                    for number, line in enumerate(f, 1):
                        if line.strip():
                            yield jsonl_row(path, number, line)
                except UnicodeDecodeError as error:
                    raise DataError(f"`dataset_name` {path}: not UTF-8 text ({error.reason}).") from None

    return IterableDataset.from_generator(rows, gen_kwargs={"paths": list(paths)})
