"""
What a local data source holds, as one short id: the SHA-256 of every byte of a file, or of a folder's files (their
relative names and contents), so that an edit anywhere, of any size, is another source. A run (`run.json`), the
prepared rows of a study (`data.prepared`) and a study's or sweep's folder name their data by it.

Reading a file whole costs what the disk and SHA-256 give (measured on 2 CPU cores: a 670 MB file, the size of
ShareGPT's release, in 1.1 s from a cold disk, 0.5 s from the page cache), so each file's id is kept in `<cache>/content/` under its real path together with what the
operating system says of the file: size, modification time, inode and change time (`st_ctime_ns`). A write of any
kind changes the change time, and no call a user makes sets it back (`touch -r`, `os.utime` restore the modification
time only), so a kept id is used only for the bytes it was computed from (then it costs under a millisecond);
anything else is read again.

`legacy_fingerprint` is the id of earlier versions (a file's size and its first and last MiB; a folder's names and
sizes): records written with it are compared through it (`same_source`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os

from .atomic import replacing
from .cache import cache_root

PREFIX = "sha256:"  # a content id; an earlier version's fingerprint is 16 hex digits without it
LEGACY_TAIL = 1 << 20  # bytes read from each end of a file by `legacy_fingerprint`


def content_id(path: str) -> str:
    """'sha256:<16 hex digits>' of the file's bytes, or of a folder's files (relative name and content id each, in
    sorted order; independent of where the folder lies)."""
    if os.path.isfile(path):
        return PREFIX + file_digest(path)[:16]
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            digest.update(f"{os.path.relpath(full, path)}\0{file_digest(full)}\n".encode())
    return PREFIX + digest.hexdigest()[:16]


def file_digest(path: str) -> str:
    """The SHA-256 (hex) of a file's bytes, kept in the cache under its real path and `os.stat` facts (see the module
    docstring); a cache that cannot be read or written is not used."""
    real = os.path.realpath(path)
    facts = stat_facts(real)
    entry = os.path.join(cache_root(), "content", hashlib.sha256(real.encode()).hexdigest()[:32] + ".json")
    with contextlib.suppress(OSError, ValueError, TypeError):
        with open(entry, encoding="utf-8") as f:
            kept = json.load(f)
        known = kept.get("sha256")
        if kept.get("path") == real and kept.get("stat") == facts and isinstance(known, str):
            return known
    value = sha256(real)
    if stat_facts(real) == facts:  # not written to while it was read
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(entry), exist_ok=True)
            with replacing(entry) as tmp, open(tmp, "w", encoding="utf-8") as f:  # concurrent runs: each its own
                json.dump({"path": real, "stat": facts, "sha256": value}, f)
    return value


def sha256(path: str) -> str:
    """The SHA-256 (hex) of a file's bytes, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def stat_facts(path: str) -> list[int]:
    """What the operating system says changes with a file's bytes: size, mtime, inode, device, change time."""
    s = os.stat(path)
    return [s.st_size, s.st_mtime_ns, s.st_ino, s.st_dev, s.st_ctime_ns]


def legacy_fingerprint(path: str) -> str:
    """The fingerprint earlier versions recorded: a file's size and its first and last MiB; a folder's files' relative
    names and sizes (16 hex digits). Read only to compare with their records: it misses edits in a file's middle."""
    digest = hashlib.sha256()
    if os.path.isfile(path):
        size = os.path.getsize(path)
        digest.update(str(size).encode())
        with open(path, "rb") as f:
            digest.update(f.read(LEGACY_TAIL))
            if size > LEGACY_TAIL:
                f.seek(max(size - LEGACY_TAIL, LEGACY_TAIL))
                digest.update(f.read())
    else:
        for root, _, files in sorted(os.walk(path)):
            for name in sorted(files):
                full = os.path.join(root, name)
                digest.update(f"{os.path.relpath(full, path)}:{os.path.getsize(full)}".encode())
    return digest.hexdigest()[:16]


def same_source(recorded: object, path: object) -> bool:
    """Whether `path` holds what a record's id says it held: a content id compared whole, an earlier version's
    fingerprint through `legacy_fingerprint` (all such a record can tell). No path (a field the data no longer
    sets) holds nothing."""
    if not isinstance(recorded, str) or not isinstance(path, str) or not os.path.exists(path):
        return False
    if recorded.startswith(PREFIX):
        return recorded == content_id(path)
    return recorded == legacy_fingerprint(path)
