"""
Output folders: where a command may write (`check_output_folder`), names that build folders inside them
(`plain_name`, `child_path`), and the one guard of a results folder, its marker (`check_folder`, `mark_folder`).

Output folders that know who wrote them. Every command that writes results (`eval robustness / generate / alpaca /
exits / harness`, `study`, `sweep`) marks its folder in its record of what it wrote (`.written-by.json`,
`utils.written_record`): the command and the settings that determine its results (earlier versions wrote them to a
`written_by.json` beside it, still read where the record names no command). Before any work, a command refuses in
one line

- a folder another command wrote (two commands given one `--output_dir` would replace each other's results.json),
  unless the two share folders by design (`eval alpaca` adds its section to a robustness report);
- its own folder written with settings that change the results (a resume continues only what matches; the settings a
  continuation may extend, e.g. a study's training seeds, are not part of them). An earlier version's marker is
  migrated where that is safe (`migration`): a setting this version no longer writes, in a group it still writes,
  decides nothing now; a setting it lacks is added only where the folder's own work vouches for it;
- a folder holding files no command marked (another tool's, or an earlier version's), whose origin it cannot check
  (subfolders with markers of their own are known: `eval/alpaca/run.py` judges beside the generations it wrote);
- a folder whose `.written-by.json` is not the library's record, or where a file the library wrote was changed since
  (a key added by hand to results.json): the commands record every file they write (`utils.written_record.recording`), and
  a rerun would write over it (`utils.written_record.check_record`).

Nothing is overwritten: the marker is written (atomically) only when the command is about to write its results.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import unicodedata
from collections.abc import Callable, Iterable, Mapping

from ..version import VERSION
from .files import json_safe
from .types import JSONObject, JSONRead
from .written_record import RECORD, check_record, read_section, write_section

MAX_NAME = 100  # bytes (UTF-8) of a plain name: files named after it ("<name>-seed12.json") stay under 255


def plain_name(name: object, flag: str, error: type[ValueError] = ValueError) -> str:
    """`name` as given when it can name a file or folder inside another: refused, naming `flag`, unless a non-empty
    string of at most `MAX_NAME` bytes without a path separator ('/' or '\\'), that does not start with '.' (no '.',
    '..' or hidden names) and holds only printable characters: no control or format character (a zero-width space
    would make a second name that looks like the first) and no space but ' '."""
    invisible = isinstance(name, str) and any(
        unicodedata.category(c)[0] == "C" or (unicodedata.category(c)[0] == "Z" and c != " ") for c in name
    )
    if (
        not isinstance(name, str)
        or not name.strip()
        or name.startswith(".")
        or any(c in name for c in "/\\")
        or invisible
        or len(name.encode()) > MAX_NAME
    ):
        raise error(
            f"`{flag}` {name!r} names a folder or file: give a plain name (printable, at most {MAX_NAME} bytes, no "
            "path separator '/' or '\\', not starting with '.', not empty)."
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


MARKER = RECORD  # the record of what was written, which names the commands that wrote (`written_record`)
LEGACY_MARKER = "written_by.json"  # earlier versions' marker of the commands, beside the record
# commands that write into one folder by design: `eval alpaca` adds its section to a robustness report folder
SHARED = {"eval alpaca": {"eval robustness"}, "eval robustness": {"eval alpaca"}}


def normalized(settings: Mapping[str, object]) -> JSONObject:
    """`settings` as they read back from JSON (tuples as lists, keys as strings), so that a saved and a new set compare
    equal when they are."""
    out: JSONObject = json.loads(json.dumps(json_safe(settings), sort_keys=True, default=str))
    return out


def read_marker(path: str, flag: str) -> dict[str, JSONRead] | None:
    """The commands that marked the folder ({command: {"settings", "version"}}: its record's, else an earlier
    version's `written_by.json`), None where it has none."""
    commands = read_section(path, "commands")
    name = MARKER
    if commands is None:
        name, legacy = LEGACY_MARKER, os.path.join(path, LEGACY_MARKER)
        if not os.path.isfile(legacy):
            return None
        try:
            with open(legacy, encoding="utf-8") as f:
                commands = json.load(f)["commands"]
        except (OSError, ValueError, KeyError, TypeError):
            commands = None
    entries = commands.values() if isinstance(commands, dict) else [None]
    if not all(isinstance(e, dict) and isinstance(e.get("settings", {}), dict) for e in entries):
        raise OutputDirError(
            f"`{flag}` {path}: its {name} is damaged, so what wrote the folder cannot be checked; give another folder."
        )
    return commands if isinstance(commands, dict) else None


def flat(settings: JSONObject, prefix: str = "") -> JSONObject:
    """Nested settings as {'a.b.c': value}, so that a difference is named down to the field."""
    out = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


MISSING = object()  # a setting one side does not write (an earlier or later version's)


def differences(saved: JSONObject, current: JSONObject, limit: int = 4, keys: list[str] | None = None) -> str:
    """'key old -> new' for the settings that differ (`keys`, else every one), down to the nested field (the first
    `limit`); a setting one side does not write reads '(unset)'."""
    a, b = flat(saved), flat(current)
    # a value changed first, then a setting one side lacks (an older version's marker)
    keys = [
        k for _, k in sorted((k not in a or k not in b, k) for k in (changed_keys(a, b) if keys is None else keys))
    ]

    def short(key: str, side: JSONObject) -> str:
        text = json.dumps(side[key]) if key in side else "(unset)"
        return text if len(text) <= 60 else text[:57] + "..."

    shown = [f"{k} {short(k, a)} -> {short(k, b)}" for k in keys[:limit]]
    return "; ".join(shown) + (f"; and {len(keys) - limit} more" if len(keys) > limit else "")


def changed_keys(a: JSONObject, b: JSONObject) -> list[str]:
    """The flat keys whose values differ, a key one side lacks included (`None` on one side and nothing on the other
    differ too)."""
    return sorted(k for k in set(a) | set(b) if a.get(k, MISSING) != b.get(k, MISSING))


# which settings an earlier version's marker lacks the folder's own work confirms (a flat key -> whether it does)
Vouch = Callable[[str], bool]


def migration(saved: JSONObject, current: JSONObject, vouch: Vouch | None = None) -> tuple[list[str], list[str]]:
    """(refused, migrated) flat keys between a folder's saved settings and this version's. A setting this version no
    longer writes, in a group it still writes (`arms.erm.training.dataset_num_proc` once a speed setting), decides
    nothing now: migrated. A setting it writes that the saved ones lack is migrated only where `vouch(key)` says the
    folder's work agrees with it (a study's data, checked against what its runs recorded); every other difference is
    refused."""
    a, b = flat(saved), flat(current)

    def group_in(key: str, side: JSONObject) -> bool:  # the setting's own group (its parent) is still written
        parent = key.rpartition(".")[0]
        return not parent or any(k.startswith(parent + ".") for k in side)

    refused: list[str] = []
    migrated: list[str] = []
    for key in changed_keys(a, b):
        if key in a and key in b:
            refused.append(key)
        elif key in a:
            (migrated if group_in(key, b) else refused).append(key)
        else:
            (migrated if vouch is not None and vouch(key) else refused).append(key)
    return refused, migrated


def check_folder(
    path: str | None, command: str, settings: JSONObject, flag: str = "--output_dir", vouch: Vouch | None = None
) -> list[str]:
    """Refuse, before any work, to write `command`'s results with `settings` into `path` (see the module docstring);
    reads only. A missing or empty folder is always fine. Returns the settings an earlier version's marker is
    migrated in (`migration`; `vouch`: which settings it lacks the folder's own work confirms)."""
    if not path or not os.path.isdir(path):
        return []
    check_record(path, flag)  # a record that is not ours, or a file ours that the user changed since it was written
    found = sorted(f for f in os.listdir(path) if not f.startswith(f".{MARKER.lstrip('.')}."))
    if found == [MARKER] and read_section(path, "commands") is None:
        found = []  # a record of files alone, none of them there
    if not found:
        return []  # missing, empty, or another worker of one sweep marking it this instant
    commands = read_marker(path, flag)
    if commands is None:
        found = [f for f in found if not is_marked(os.path.join(path, f))]  # marked subfolders are known
        if not found:
            return []
        raise OutputDirError(
            f"`{flag}` {path} holds files that no constrained-sft command marked as its own ({', '.join(found[:3])}"
            f"{', ...' if len(found) > 3 else ''}; no command named in a {MARKER}), so they could be another run's: "
            "give an empty or new folder."
        )
    others = [c for c in commands if c != command and c not in SHARED.get(command, set())]
    if others:
        raise OutputDirError(
            f"`{flag}` {path} holds the results of `constrained-sft {others[0]}`; writing `{command}` results there "
            "would replace or mix with them: give another folder."
        )
    if command not in commands:
        return []
    saved, current = commands[command].get("settings", {}), normalized(settings)
    refused, migrated = migration(saved, current, vouch)
    if refused:
        raise OutputDirError(
            f"`{flag}` {path} holds `{command}` results made with other settings "
            f"({differences(saved, current, keys=refused)}): give another folder, or the same settings to continue it."
        )
    return migrated


def saved_settings(path: str | None, command: str, flag: str) -> JSONRead | None:
    """The settings `command` recorded in the folder's marker (None: no folder, no marker, or not `command`'s)."""
    commands = read_marker(path, flag) if path and os.path.isdir(path) else None
    entry = (commands or {}).get(command)
    return entry.get("settings") if isinstance(entry, dict) else None


def migrated_line(flag: str, path: str, saved: JSONObject, keys: list[str]) -> str:
    """What continuing an earlier version's folder changed in its marker (`check_folder`'s migrated settings)."""

    def arms(names: Iterable[str]) -> list[str]:
        return list(dict.fromkeys(re.sub(r"^arms\.[^.]+\.", "arms.*.", k) for k in names))

    gone = arms(k for k in keys if k in flat(saved))
    new = arms(k for k in keys if k not in flat(saved))
    parts = ([f"{', '.join(gone)} no longer decide(s) the results"] if gone else []) + (
        [f"{', '.join(new)} recorded now"] if new else []
    )
    return f"`{flag}` {path}: written by an earlier version, continued; its settings migrated ({'; '.join(parts)})."


def mark_folder(path: str, command: str, settings: JSONObject) -> None:
    """Record `command` and its `settings` in the folder's marker (created with the folder if missing); called once
    `check_folder` has passed, as the command starts writing. Workers of one sweep may mark one folder at once: the
    marker is written only when it changes, through a temporary file of this process's own."""
    os.makedirs(path, exist_ok=True)
    marked = read_marker(path, "--output_dir")
    commands = dict(marked or {})
    entry: JSONObject = {"settings": normalized(settings), "version": VERSION}
    if commands.get(command) == entry and read_section(path, "commands") is not None:
        return
    commands[command] = entry
    write_section(path, "commands", commands)


def is_marked(path: str) -> bool:
    """Whether the folder at `path` is a command's: its record names a command, or an earlier version's marker is
    there."""
    return os.path.isdir(path) and (
        read_section(path, "commands") is not None or os.path.isfile(os.path.join(path, LEGACY_MARKER))
    )
