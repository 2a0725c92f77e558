"""
Chat data prepared once for many runs (a study's arms and seeds): the (train, held-out) rows in TRL's format written
to disk the first time (`Dataset.save_to_disk`) and read back by every later run, so that TRL's tokenization, a
`Dataset.map` on a dataset backed by those files, lands in the datasets cache beside them and is computed once for
every run with the same tokenizer, length and format. What decides the rows is the recipe's data fields and what the
source holds (`source_identity`: a local source's content id, a package source's version): one folder per such key.
Concurrent runs (a study's `--jobs`) take a file lock, so the first prepares and the others wait and reuse.

    <folder>/<key>/train/, held_out/   the rows, Arrow files, and TRL's cached tokenizations beside them
    <folder>/<key>/rows.json           the data fields, the row counts, the seconds the preparation took, and the
                                       SHA-256 of every file the preparation wrote

A prepared folder is checked before it is reused (its files against those hashes, kept per file by `os.stat`, so a
check of unchanged files reads nothing): a folder a kill, a full disk or a hand left damaged (a truncated Arrow file
or rows.json, a split missing) is prepared again, with a line saying what was wrong.
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

from ..utils.content import content_id, file_digest
from ..utils.files import write_json
from .chat import DataArguments, load_train_eval
from .errors import DataError
from .local_files import check_regular

logger = logging.getLogger(__name__)

ROWS = "rows.json"
SPLITS = ("train", "held_out")


def source_identity(name: str | None) -> str | None:
    """What a source holds, as far as it can be known before reading it: a local file's or folder's content id
    (`content.content_id`), a package source's package and version; None for a Hub id (the Hub names a dataset, and a
    study reads it once into its prepared folder: every run of the study trains on those rows)."""
    if isinstance(name, str) and os.path.exists(name):
        check_regular(name)  # a named pipe: refused, not read without end
        return content_id(name)
    if isinstance(name, str) and name.startswith("pkg:"):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"{name[4:]}=={version(name[4:])}"
        except PackageNotFoundError:
            return None  # refused, naming the package, when the source is read
    return None


def data_key(args: DataArguments) -> str:
    """A short hash of what decides the rows: the data fields of `DataArguments` (a subclass's other fields, such as
    the `train` command's, decide nothing here) and what the source holds (`source_identity`)."""
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(DataArguments)}
    fields["source"] = source_identity(args.dataset_name)
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
    def tokenizing(self, local_main: bool = True):
        """Of a launch's processes only the local main one (`local_main`) takes the lock; the others wait for it
        inside TRL's own `main_process_first`, then read its cache. A lock around that barrier held by another rank
        would keep the main process from it while that rank waits for the main one: a deadlock."""
        if self.folder is None or not local_main:
            yield
            return
        with locked(os.path.join(self.folder, "tokenize")):
            yield


def prepared_splits(args: DataArguments, folder: str) -> PreparedData:
    """(train, held-out) as `load_train_eval` gives them, prepared once into `folder` (see the module docstring) and
    read from there by every later call; the log says which. A streamed source is read as a stream, unprepared."""
    if args.streaming:
        return PreparedData(*load_train_eval(args), None)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise DataError(f"The prepared-data folder {folder} is a file; move it away (the data is prepared there).")
    where = prepared_folder(args, folder)
    with locked(where):
        problem = damage(where)
        made = problem is not None
        if problem and os.path.exists(where):
            logger.warning("data: the rows prepared in %s are damaged (%s); preparing them again.", where, problem)
        if made:
            prepare(args, where)
        with open(os.path.join(where, ROWS)) as f:
            rows = json.load(f)
    counts = f"{rows['train']:,} training and {rows['held_out']:,} held-out rows"
    if made:
        logger.warning(
            "data: prepared the %s in %.1f s into %s; every run on the same data reads them there, and TRL's "
            "tokenization of them is cached beside them (datasets' cache).",
            counts,
            rows["seconds"],
            where,
        )
    else:
        logger.warning(
            "data: reusing the %s prepared in %s (not read, converted or tokenized again where a run with the same "
            "tokenizer and length has tokenized them).",
            counts,
            where,
        )
    train, held_out = (load_from_disk(os.path.join(where, split)) for split in SPLITS)
    return PreparedData(train, held_out, where)


def damage(where: str) -> str | None:
    """What is wrong with the prepared folder `where`, in words (None: complete and as written). A folder not prepared
    yet is "not prepared"; one an earlier version prepared (no hashes) is checked by loading its splits."""
    try:
        with open(os.path.join(where, ROWS), encoding="utf-8") as f:
            rows = json.load(f)
        counts = {split: rows[split] for split in SPLITS}
    except FileNotFoundError:
        return f"left half-written, no {ROWS}" if os.path.lexists(where) else "not prepared"
    except (OSError, ValueError, KeyError, TypeError):
        return f"{ROWS} cannot be read"
    written = rows.get("files")
    if not isinstance(written, dict):  # an earlier version's folder
        try:
            if any(len(load_from_disk(os.path.join(where, split))) != counts[split] for split in SPLITS):
                return "a split's rows are not the ones counted"
        except Exception as error:  # noqa: BLE001 - whatever datasets or pyarrow raise on a damaged folder
            return f"a split cannot be read ({type(error).__name__})"
        return None
    for name, digest in sorted(written.items()):
        path = os.path.join(where, name)
        if not os.path.isfile(path):
            return f"{name} is missing"
        if file_digest(path) != digest:
            return f"{name} is not the file written"
    return None


def prepare(args: DataArguments, where: str) -> None:
    """Read, validate and convert the rows (`load_train_eval`), then write them; a folder left half-written by a kill,
    or damaged since, is written again (rows.json, written last with the hashes of the files, marks it complete)."""
    start = time.perf_counter()
    splits = load_train_eval(args)
    if os.path.isdir(where):
        shutil.rmtree(where)
    elif os.path.lexists(where):
        os.remove(where)
    written = {}
    for split, rows in zip(SPLITS, splits, strict=True):
        rows.save_to_disk(os.path.join(where, split))
        for name in sorted(os.listdir(os.path.join(where, split))):
            written[f"{split}/{name}"] = file_digest(os.path.join(where, split, name))
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(DataArguments)}
    counts = {split: len(rows) for split, rows in zip(SPLITS, splits, strict=True)}
    seconds = round(time.perf_counter() - start, 2)
    write_json(os.path.join(where, ROWS), {**counts, "seconds": seconds, "data": fields, "files": written})
