"""
Chat data prepared once for many runs (a study's arms and seeds): the (train, held-out) rows in TRL's format written
to disk the first time (`Dataset.save_to_disk`) and read back by every later run, so that TRL's tokenization, a
`Dataset.map` on a dataset backed by those files, lands in the datasets cache beside them and is computed once for
every run with the same tokenizer, length and format. What decides the rows is the recipe's data fields and, for a
local source, its fingerprint (`local_files.source_fingerprint`): one folder per such key. Concurrent runs (a study's
`--jobs`) take a file lock, so the first prepares and the others wait and reuse.

    <folder>/<key>/train/, held_out/   the rows, Arrow files, and TRL's cached tokenizations beside them
    <folder>/<key>/rows.json           the data fields, the row counts, the seconds the preparation took
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
from contextlib import contextmanager

from datasets import Dataset, load_from_disk

from ..utils.files import write_json
from .chat import DataArguments, load_train_eval
from .local_files import source_fingerprint

logger = logging.getLogger(__name__)

ROWS = "rows.json"
SPLITS = ("train", "held_out")


def data_key(args: DataArguments) -> str:
    """A short hash of what decides the rows: the data fields of `DataArguments` (a subclass's other fields, such as
    the `train` command's, decide nothing here) and a local source's fingerprint."""
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(DataArguments)}
    source = args.dataset_name
    if isinstance(source, str) and os.path.exists(source):
        fields["source_fingerprint"] = source_fingerprint(source)
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def prepared_folder(args: DataArguments, folder: str) -> str:
    return os.path.join(folder, data_key(args))


@contextmanager
def locked(path: str):
    """An exclusive lock on `path` + '.lock' between processes (filelock), held for the block."""
    from filelock import FileLock

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with FileLock(path + ".lock"):
        yield


@dataclasses.dataclass
class PreparedData:
    """The prepared (train, held-out) rows and their folder; `tokenizing()` holds the lock under which a run builds
    its trainer (TRL tokenizes there), so that concurrent runs tokenize once and the later ones read the cache."""

    train: Dataset
    held_out: Dataset
    folder: str | None

    @contextmanager
    def tokenizing(self):
        if self.folder is None:
            yield
            return
        with locked(os.path.join(self.folder, "tokenize")):
            yield


def prepared_splits(args: DataArguments, folder: str) -> PreparedData:
    """(train, held-out) as `load_train_eval` gives them, prepared once into `folder` (see the module docstring) and
    read from there by every later call; the log says which. A streamed source is read as a stream, unprepared."""
    if args.streaming:
        return PreparedData(*load_train_eval(args), None)
    where = prepared_folder(args, folder)
    with locked(where):
        made = not os.path.isfile(os.path.join(where, ROWS))
        if made:
            prepare(args, where)
        with open(os.path.join(where, ROWS)) as f:
            rows = json.load(f)
    counts = f"{rows['train']:,} training and {rows['held_out']:,} held-out rows"
    if made:
        logger.warning(
            "data: prepared the %s in %.1f s into %s; every run on the same data reads them there, and TRL's "
            "tokenization of them is cached beside them (datasets' cache).", counts, rows["seconds"], where
        )  # fmt: skip
    else:
        logger.warning(
            "data: reusing the %s prepared in %s (not read, converted or tokenized again where a run with the same "
            "tokenizer and length has tokenized them).", counts, where
        )  # fmt: skip
    return PreparedData(*(load_from_disk(os.path.join(where, split)) for split in SPLITS), where)


def prepare(args: DataArguments, where: str) -> None:
    """Read, validate and convert the rows (`load_train_eval`), then write them; a folder left half-written by a kill
    is written again (rows.json, written last, marks it complete)."""
    start = time.perf_counter()
    splits = load_train_eval(args)
    if os.path.isdir(where):
        shutil.rmtree(where)
    for split, rows in zip(SPLITS, splits, strict=True):
        rows.save_to_disk(os.path.join(where, split))
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(DataArguments)}
    counts = {split: len(rows) for split, rows in zip(SPLITS, splits, strict=True)}
    write_json(os.path.join(where, ROWS), {**counts, "seconds": round(time.perf_counter() - start, 2), "data": fields})
