"""
What this library (or a script beside it) wrote into a folder, recognised by a record of what it wrote rather than by
a mark alone: `<folder>/.written-by.json` names who wrote and each file's SHA-256. One rule follows for every output
the library replaces (a run's model card, a wheelhouse, a bundle, an unpacked assets folder): a file is the library's
to rewrite or remove only while it is a plain file listed in the record with the bytes it was written with. A file a
user added beside, a file of ours a user edited since, a symlink or a folder in its place is the user's: never
overwritten, followed or removed (the caller writes beside it, or refuses naming it).

    .written-by.json   {"by": "gpu_bundle.py", "files": {"part-1/manifest.json": "<sha256>", ...}}

A record may hold sections beside the files (`read_section`, `write_section`): a command's result folder names the
commands that wrote there and the settings that decide their results (`commands`: {command: {"settings", "version"}},
`utils.output_folders.check_folder` reads them), and `benchmarks/gpu_study.sh` the device it ran on (`device`). One record of
what was written, in one file, by one writer (earlier versions kept the commands in a `written_by.json` beside it,
still read by `utils.output_folders.read_marker`, and the GPU script's record in its `device.txt`).

Earlier versions marked a script's folder with `.written-by` (the script's name, no file list); such a folder is
read through the script's own layout (`legacy`, a test of relative paths the script wrote).

A record that is not one (a `.written-by.json` of the user's: not JSON of its shape, a folder, a link) is the user's
file like any other: never replaced, and a folder holding one is refused before any work (`check_record`).

The commands' result folders (`eval robustness / generate / alpaca / exits / harness`) follow the same rule
through `recording`: while a command writes its results, every file written through `files.atomic_path` below its
folder is recorded as `WRITER`'s (its hash is noted as pending before the file is renamed into place, then as
written, so a kill at any instant leaves a file the record vouches for), and a file there that is not the library's
as written (a key added by hand to results.json) is kept: the run's version goes beside it (`beside`), and a later
run refuses before any work to write over it (`check_record`).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator

from .atomic import replacing
from .content import sha256

RECORD = ".written-by.json"
FIELDS = ("by", "files", "pending")  # a record's own keys; any other is a section
LEGACY_MARK = ".written-by"  # earlier versions' mark of a script's folder: the script's name
WRITER = "constrained-sft"  # the library's own name in a record (a script beside it records under its own)


class RecordError(ValueError):
    """A folder this library must not write into: its record is not one, another tool wrote it, or a file the library
    wrote there was changed since (the message names it, and the flag)."""


def read_record(folder: str) -> tuple[str | None, dict[str, str]]:
    """(who wrote, {relative path: sha256}) of the folder's record; (None, {}) where it has none or it cannot be
    read (then nothing in the folder counts as written by us: the safe reading)."""
    by, files, _ = _read(folder)
    return by, files


def _load(folder: str) -> tuple[str, dict[str, str], dict[str, str], dict[str, object]] | None:
    """(who wrote, {path: sha256} written, {path: sha256} pending: about to be renamed into place, the sections) of
    the folder's record, where it is one (a plain file of its shape); else None."""
    path = os.path.join(folder, RECORD)
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        by, files, pending = value["by"], value["files"], value.get("pending", {})
        if isinstance(by, str) and all(
            isinstance(d, dict) and all(isinstance(v, str) for v in d.values()) for d in (files, pending)
        ):
            return by, files, pending, {k: v for k, v in value.items() if k not in FIELDS}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def _read(folder: str) -> tuple[str | None, dict[str, str], dict[str, str]]:
    """(who wrote, {path: sha256} written, {path: sha256} pending); (None, {}, {}) where there is no record."""
    loaded = _load(folder)
    return (None, {}, {}) if loaded is None else loaded[:3]


def write_whole(path: str, value: object) -> None:
    """`value` as JSON at `path`, written whole: through a temporary file of this process's own beside it (several
    processes may write one file at once: a sweep's workers marking their folder), fsynced and renamed into place, so
    a reader sees the old file or the new one. Not recorded (`files.atomic_path` records what a command writes): the
    record itself and a folder's marker are written so."""
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)


def _sections(folder: str, by: str) -> dict[str, object]:
    """The record's sections, where it is `by`'s (a record replaced by another writer starts without them)."""
    loaded = _load(folder)
    return loaded[3] if loaded is not None and loaded[0] == by else {}


def _write(
    folder: str, by: str, files: dict[str, str], pending: dict[str, str] | None = None, **sections: object
) -> None:
    """The record (`write_whole`), its sections kept unless given."""
    value: dict[str, object] = {"by": by, "files": dict(sorted(files.items()))}
    if pending:
        value["pending"] = dict(sorted(pending.items()))
    value.update({**_sections(folder, by), **sections})
    write_whole(os.path.join(folder, RECORD), value)


def read_section(folder: str, name: str, by: str = WRITER) -> object:
    """The record's section `name` as JSON holds it (the caller checks its shape), None where the folder has no
    record of `by`'s or the record has no such section."""
    return _sections(folder, by).get(name)


def write_section(folder: str, name: str, value: object, by: str = WRITER) -> None:
    """Set the record's section `name` (`utils.output_folders.mark_folder`: the commands), its files kept; a folder without
    a record gets one of `by`'s."""
    with _LOCK:
        if problem := record_problem(folder, by):  # `check_record` refused it before any work
            raise RecordError(f"{folder}: {problem}; not marked.")
        writer, files, pending = _read(folder)
        _write(folder, writer or by, files, pending, **{name: value})


def record_problem(folder: str, by: str = WRITER) -> str | None:
    """Why `folder`'s record is not `by`'s to extend (None where it is, or there is none): a folder or link in its
    place, a file not of its shape (the user's), or another writer's."""
    path = os.path.join(folder, RECORD)
    if not os.path.lexists(path):
        return None
    if os.path.islink(path) or not os.path.isfile(path):
        kind = "a link" if os.path.islink(path) else "a folder" if os.path.isdir(path) else "no plain file"
        return f"its {RECORD} is {kind}, not a record of what {by} wrote"
    writer, _ = read_record(folder)
    if writer is None:
        return f"its {RECORD} is not a record of what {by} wrote (not JSON of its shape): a file of yours"
    if writer != by:
        return f"its {RECORD} says {writer} wrote it"
    return None


def changed(folder: str) -> list[str]:
    """The files `folder`'s record lists that are no longer as written: edited, or a link or folder in their place
    (relative paths; a file since removed is not listed: nothing of the user's is in the way)."""
    _, files, pending = _read(folder)
    return [
        name
        for name, digest in files.items()
        if os.path.lexists(os.path.join(folder, name))
        and not (plain_file(folder, name) and sha256(os.path.join(folder, name)) in (digest, pending.get(name)))
    ]


def check_record(folder: str | None, flag: str, by: str = WRITER, writes_over: bool = True) -> None:
    """Before any work: `folder` (where a command is about to write) is refused in one line naming `flag` when its
    record is not `by`'s (`record_problem`) or, where the caller writes over what it wrote (`writes_over`: a
    command's results; not a model card, which goes beside an edited one), a file `by` wrote there was changed since
    (`changed`)."""
    if not folder or not os.path.isdir(folder):
        return
    if problem := record_problem(folder, by):
        raise RecordError(
            f"`{flag}` {folder}: {problem}; nothing there is {by}'s to replace: move it away, or give another folder."
        )
    if writes_over and (edited := changed(folder)):
        more = f" (and {len(edited) - 1} more)" if len(edited) > 1 else ""
        raise RecordError(
            f"`{flag}` {folder}: {edited[0]}{more} was changed since {by} wrote it, and this run would write it "
            "again: move your version away (or undo the change), or give another folder."
        )


def plain_file(folder: str, name: str) -> bool:
    """`folder`/`name` is a regular file reached through no symlink below `folder`."""
    parts = os.path.normpath(name).split(os.sep)
    for i in range(1, len(parts) + 1):
        if os.path.islink(os.path.join(folder, *parts[:i])):
            return False
    return os.path.isfile(os.path.join(folder, name))


def record_written(folder: str, by: str, names: list[str] | None = None) -> None:
    """Record what `by` wrote into `folder`: `names` (relative paths) added to its record with their bytes now, or
    (None) every file below `folder`, replacing the record (a folder built whole). Written atomically."""
    if problem := record_problem(folder, by) if names is not None else None:
        raise RecordError(f"{folder}: {problem}; not replaced.")  # `check_record` said so before any work
    if names is None:  # what a script built: its plain files (it writes no links or empty folders)
        files = {name: sha256(os.path.join(folder, name)) for name in walk(folder) if plain_file(folder, name)}
    else:
        writer, files = read_record(folder)
        files = dict(files) if writer in (None, by) else {}
        files.update({name: sha256(os.path.join(folder, name)) for name in names})
    _write(folder, by, files)


def walk(folder: str) -> list[str]:
    """Every entry below `folder` that is not a folder (files, symlinks, anything else), as relative paths, the
    record and the legacy mark left out; a symlink to a folder is an entry, never followed."""
    found = []
    for root, dirs, files in os.walk(folder):
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        dirs[:] = sorted(d for d in dirs if d not in links)
        for name in sorted(files + links):
            rel = os.path.relpath(os.path.join(root, name), folder)
            if rel not in (RECORD, LEGACY_MARK):
                found.append(rel)
        if not files and not dirs and not links and root != folder:
            found.append(os.path.relpath(root, folder) + os.sep)  # an empty folder: nobody's file, but not ours
    return found


def foreign(folder: str, by: str, legacy: Callable[[str], bool] | None = None) -> list[str]:
    """What in `folder` `by` did not write, or wrote and was changed since (relative paths; an empty folder with a
    trailing separator): everything, when the folder has no record of `by`'s. A folder an earlier version marked
    (`LEGACY_MARK` naming `by`) is read through `legacy`, the test of the paths the script writes."""
    entries = walk(folder)
    if record_problem(folder, by) and os.path.lexists(os.path.join(folder, RECORD)):
        entries.append(RECORD)  # a record that is not `by`'s (the user's file, another tool's) is not `by`'s either
    writer, files = read_record(folder)
    if writer == by:
        return [
            e
            for e in entries
            if e not in files or not plain_file(folder, e) or sha256(os.path.join(folder, e)) != files[e]
        ]
    mark = os.path.join(folder, LEGACY_MARK)
    if legacy is not None and os.path.isfile(mark) and not os.path.islink(mark):
        with open(mark, encoding="utf-8", errors="replace") as f:
            if f.read().strip() == by:
                return [e for e in entries if not (plain_file(folder, e) and legacy(e))]
    return entries


# --- a command's result folder, recorded as it is written -----------------------------------------------------------
_ACTIVE: dict[str, str] = {}  # real path of a folder a command is writing its results into -> the writer recorded
_LOCK = threading.Lock()  # one record update at a time (a command's threads write into one folder)


@contextlib.contextmanager
def recording(folder: str | None, by: str = WRITER) -> Iterator[None]:
    """Within the block, every file `files.atomic_path` writes below `folder` is recorded in its record as `by`'s,
    and one of the user's there is kept (`destination`); a command's folder (None: nothing recorded). Whoever enters
    it owns the folder: one process writes it (the commands; not a study's jobs, which write their own folders)."""
    if folder is None:
        yield
        return
    root = os.path.realpath(folder)  # the folder may not exist yet: the command checks it, then makes it
    _ACTIVE[root] = by
    try:
        yield
    finally:
        _ACTIVE.pop(root, None)


def _recorded_root(path: str) -> tuple[str, str, str] | None:
    """(the recording folder holding `path`, its writer, `path` relative to it), None where no command records it."""
    if not _ACTIVE or os.path.basename(path) == RECORD:
        return None
    real = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))
    for root, by in _ACTIVE.items():
        if real.startswith(root + os.sep):
            return root, by, os.path.relpath(real, root)
    return None


def beside(path: str) -> str:
    """A free name beside `path` for the run's version of a file that is the user's: results.json -> results.new.json
    (then .new2, ...)."""
    stem, ext = os.path.splitext(path)
    candidates = (f"{stem}.new{n if n > 1 else ''}{ext}" for n in range(1, 1000))
    return next(c for c in candidates if not os.path.lexists(c))


def destination(path: str, tmp: str) -> str:
    """Where `files.atomic_path` renames `tmp` to: `path`, or (below a `recording` folder, `path` being the user's:
    not as the record has it) a name beside it, said in one line. The new file's hash is noted as pending first."""
    found = _recorded_root(path)
    if found is None:
        return path
    root, by, name = found
    with _LOCK:
        if problem := record_problem(root, by):  # `check_record` refused it before any work; never written over
            raise RecordError(f"{root}: {problem}; {path} not written.")
        writer, files, pending = _read(root)
        theirs = os.path.lexists(path) and writer is not None  # no record: a new folder, or an earlier version's
        if theirs and plain_file(root, name):
            theirs = sha256(path) not in (files.get(name), pending.get(name))
        if theirs:
            kept, path = path, beside(path)
            name = os.path.relpath(path, root)
            print(f"{kept} is not as {by} wrote it (changed since?): kept; this run's is {path}.")
        pending[name] = sha256(tmp)
        _write(root, by, files, pending)
    return path


def written(path: str) -> None:
    """After `files.atomic_path` renamed its file to `path`: the pending hash becomes the written one."""
    found = _recorded_root(path)
    if found is None:
        return
    root, by, name = found
    with _LOCK:
        _, files, pending = _read(root)
        if name in pending:
            files[name] = pending.pop(name)
            _write(root, by, files, pending)
