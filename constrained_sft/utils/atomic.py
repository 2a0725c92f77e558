"""
Writing a file whole, the one atomic writer of the package and of the scripts beside it (`files.atomic_path`,
`written_record.write_whole`, the content cache, the GPU script's archive): the new bytes go to a temporary file
beside the target, fsynced and renamed over it only when they are complete, so a reader, or a run killed mid-write,
sees the old file or the new one, never half of one. A folder written whole (`replacing_folder`: a model converted
for the cache) goes the same way, in a temporary folder beside its target. Hand-written because the standard library has no such writer
(`tempfile` makes the temporary, `os.replace` the rename; the fsync between them is what makes it whole on disk).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def replacing(
    path: str,
    tmp: str | None = None,
    destination: Callable[[str, str], str] | None = None,
    after: Callable[[str], None] | None = None,
) -> Iterator[str]:
    """
    A temporary path to write `path`'s new content to: `tmp` (a fixed name, so a run killed mid-write leaves it for
    the next write to reuse and consume) or, None, one of this process's own beside `path` (several processes may
    write one file at once: a sweep's workers marking their folder). When the block succeeds it is fsynced and renamed
    over `path`, or over `destination(path, tmp)` (a recorded folder's: beside a file of the user's), then
    `after(target)`; a temporary left by a failed block is removed.
    """
    if tmp is None:
        folder, name = os.path.split(path)
        handle, tmp = tempfile.mkstemp(prefix=f".{name.lstrip('.')}.", dir=folder or ".")
        os.close(handle)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        target = destination(path, tmp) if destination is not None else path
        os.replace(tmp, target)
        if after is not None:
            after(target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@contextlib.contextmanager
def replacing_folder(path: str) -> Iterator[str]:
    """
    A temporary folder beside `path` to write the folder's new content into (this process's own: several may build
    the same cache entry at once). When the block succeeds it takes `path`'s place: renamed onto it where `path` is
    absent (one atomic rename), else the old folder is renamed aside first and removed after, so the gap with no
    folder is two renames, not the removal of a model's files. A failed block leaves `path` as it was and removes the
    temporary.
    """
    parent, name = os.path.split(os.path.abspath(path))
    tmp = tempfile.mkdtemp(prefix=f".{name}.", dir=parent)
    try:
        yield tmp
        old = None
        if os.path.lexists(path):
            old = tempfile.mkdtemp(prefix=f".{name}.old.", dir=parent)
            os.replace(path, os.path.join(old, name))
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
