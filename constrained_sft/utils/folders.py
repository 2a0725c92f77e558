"""Output folders a command may write to, and names that build folders inside them."""

from __future__ import annotations

import os
import tempfile


def plain_name(name: object, flag: str, error: type[ValueError] = ValueError) -> str:
    """`name` as given when it can name a file or folder inside another: refused, naming `flag`, unless a non-empty
    string without a path separator ('/' or '\\') or a control character that does not start with '.' (no '.',
    '..' or hidden names)."""
    if (
        not isinstance(name, str)
        or not name.strip()
        or name.startswith(".")
        or any(c in name for c in "/\\")
        or any(ord(c) < 32 for c in name)
    ):
        raise error(
            f"`{flag}` {name!r} names a folder or file: give a plain name (no path separator '/' or '\\', not "
            "starting with '.', not empty)."
        )
    return name


def child_path(parent: str, *parts: str) -> str:
    """`os.path.join(parent, *parts)`, refused (`ValueError`) when it would lie outside `parent` (a part that is a
    path or '..'): every folder a name builds stays inside its parent."""
    path = os.path.join(parent, *parts)
    root = os.path.realpath(parent)
    if os.path.commonpath([root, os.path.realpath(path)]) != root or any(not p or p in (".", "..") for p in parts):
        raise ValueError(f"{path!r} would lie outside {parent!r}: names that build folders must be plain names.")
    return path


class OutputDirError(ValueError):
    """An `output_dir` a run must not write to; the message names the folder, why, and the flag that allows it."""


def check_output_folder(path: str | None, flag: str, error: type[ValueError] = ValueError) -> None:
    """
    An output folder that cannot be written is refused before any work, naming `flag`: an empty path, an existing
    file, a path below a file, or a missing folder that cannot be created where it would be (a read-only file system,
    a virtual one like /proc). A missing folder is not created here: a uniquely named folder is made and removed in
    its nearest existing parent (so ranks of one launch probing the same path at once do not race). None: unset,
    left to the caller's own "required" check.
    """
    if path is None:
        return
    if not str(path).strip():
        raise error(f"`{flag}` is empty; give a folder (it is created if missing).")
    if os.path.isdir(path):
        if not os.access(path, os.W_OK | os.X_OK):
            raise error(f"`{flag}` {path} is a folder this user cannot write to; give another folder.")
        return
    if os.path.exists(path):
        raise error(f"`{flag}` {path} is an existing file; give a folder (it is created if missing).")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise error(f"`{flag}` {path} lies below {parent}, which is a file; give a folder (it is created if missing).")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".constrained-sft-probe-", dir=parent))
    except OSError as problem:
        raise error(
            f"`{flag}` {path} cannot be created in {parent} ({problem.strerror}); give a folder you can write to."
        ) from None
