"""
Local data files (.json, .jsonl, .parquet, .csv, or a folder of them) read as a `DatasetDict`, with the file, line and
column named when a file is not what its extension says: undecodable text, a malformed JSON line, a .json file that
holds one object instead of rows.
"""

from __future__ import annotations

import json
import os

from datasets import DatasetDict, load_dataset

from .errors import DataError

LOCAL_LOADERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def load_local(path: str) -> DatasetDict:
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
        for f in files:
            check_rows_file(f)
            diagnose(f)
        try:
            return load_dataset(kinds.pop(), data_files=by_split)
        except Exception as e:  # pyarrow / json errors on a broken file: find the file and line
            for f in files:
                diagnose(f)
            raise DataError(f"`dataset_name` {path!r}: could not read its files ({e}).") from e
    ext = os.path.splitext(path)[1]
    if ext not in LOCAL_LOADERS:
        raise DataError(f"`dataset_name` {path!r}: unsupported data file; use one of {sorted(LOCAL_LOADERS)}.")
    check_rows_file(path)
    diagnose(path)  # a whole read and parse of a text file: the file, line and column of what the loader cannot read
    try:
        return load_dataset(LOCAL_LOADERS[ext], data_files={"train": path})
    except Exception as e:  # pyarrow / json errors on a broken file
        diagnose(path)
        raise DataError(
            f"`dataset_name` {path!r}: could not read it as {LOCAL_LOADERS[ext]} ({e}); it must hold rows, one object "
            "per training example."
        ) from e


def check_rows_file(path: str) -> None:
    """A .json file must hold rows (a list of objects) or columns (an object of lists), not one object: the loader
    would read a single object as one row. Read only when the file starts with '{'."""
    if not path.endswith(".json"):
        return
    with open(path, "rb") as f:
        start = f.read(64).lstrip()
    if not start.startswith(b"{"):
        return
    diagnose(path)
    with open(path, encoding="utf-8") as f:
        top = json.load(f)
    if not all(isinstance(v, list) for v in top.values()):
        raise DataError(
            f"`dataset_name` {path}: the top level is one object (keys {sorted(top)[:6]}); a .json data file holds a "
            'list of rows, [{"prompt": ..., "completion": ...}, ...], or columns of equal length, {"prompt": [...]}.'
        )


def diagnose(path: str) -> None:
    """Raise [`DataError`] naming the file, line and column of the first undecodable or malformed line of a text data
    file (.jsonl: every line one JSON object; .json: one document; .csv: UTF-8); nothing found: return."""
    ext = os.path.splitext(path)[1]
    if ext not in (".json", ".jsonl", ".csv"):
        return
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DataError(
            f"`dataset_name` {path}:{line}: not UTF-8 text ({error.reason} at byte {error.start})."
        ) from None
    if ext == ".json":
        try:
            json.loads(text)
        except json.JSONDecodeError as error:
            raise DataError(
                f"`dataset_name` {path}:{error.lineno}:{error.colno}: not valid JSON ({error.msg})."
            ) from None
    elif ext == ".jsonl":
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataError(
                    f"`dataset_name` {path}:{number}:{error.colno}: not a JSON object ({error.msg}); a .jsonl file holds "
                    "one JSON object per line."
                ) from None
            if not isinstance(row, dict):
                raise DataError(
                    f"`dataset_name` {path}:{number}: a {type(row).__name__}, not a JSON object; a .jsonl file holds one "
                    "object (one row) per line."
                )
