"""
What this library (or a script beside it) wrote into a folder, recognised by a record of what it wrote rather than by
a mark alone: `<folder>/.written-by.json` names who wrote and each file's SHA-256. One rule follows for every output
the library replaces (a run's model card, a wheelhouse, a bundle, an unpacked assets folder): a file is the library's
to rewrite or remove only while it is a plain file listed in the record with the bytes it was written with. A file a
user added beside, a file of ours a user edited since, a symlink or a folder in its place is the user's: never
overwritten, followed or removed (the caller writes beside it, or refuses naming it).

    .written-by.json   {"by": "gpu_bundle.py", "files": {"part-1/manifest.json": "<sha256>", ...}}

Earlier versions marked a script's folder with `.written-by` (the script's name, no file list); such a folder is
read through the script's own layout (`legacy`, a test of relative paths the script wrote).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from .content import sha256

RECORD = ".written-by.json"
LEGACY_MARK = ".written-by"  # earlier versions' mark of a script's folder: the script's name


def read_record(folder: str) -> tuple[str | None, dict[str, str]]:
    """(who wrote, {relative path: sha256}) of the folder's record; (None, {}) where it has none or it cannot be
    read (then nothing in the folder counts as written by us: the safe reading)."""
    path = os.path.join(folder, RECORD)
    if os.path.islink(path) or not os.path.isfile(path):
        return None, {}
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        by, files = value["by"], value["files"]
        if isinstance(by, str) and isinstance(files, dict) and all(isinstance(v, str) for v in files.values()):
            return by, files
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None, {}


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
    from .files import write_json

    if names is None:  # what a script built: its plain files (it writes no links or empty folders)
        files = {name: sha256(os.path.join(folder, name)) for name in walk(folder) if plain_file(folder, name)}
    else:
        writer, files = read_record(folder)
        files = dict(files) if writer in (None, by) else {}
        files.update({name: sha256(os.path.join(folder, name)) for name in names})
    write_json(os.path.join(folder, RECORD), {"by": by, "files": dict(sorted(files.items()))})


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
