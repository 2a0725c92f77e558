"""
Output folders that know who wrote them. Every command that writes results (`eval robustness / generate / alpaca /
exits / harness`, `study`, `sweep`) marks its folder with `written_by.json`: the command and the settings that
determine its results. Before any work, a command refuses in one line

- a folder another command wrote (two commands given one `--output_dir` would replace each other's results.json),
  unless the two share folders by design (`eval alpaca` adds its section to a robustness report);
- its own folder written with settings that change the results (a resume continues only what matches; the settings a
  continuation may extend, e.g. a study's training seeds, are not part of them);
- a folder holding files no command marked (another tool's, or an earlier version's), whose origin it cannot check
  (subfolders with markers of their own are known: `eval/alpaca/run.py` judges beside the generations it wrote).

Nothing is overwritten: the marker is written (atomically) only when the command is about to write its results.
"""

from __future__ import annotations

import json
import os
import tempfile

from ..data import model_fingerprint
from ..utils.files import json_safe
from ..utils.folders import OutputDirError
from ..utils.types import JSONObject
from ..version import VERSION

MARKER = "written_by.json"
# commands that write into one folder by design: `eval alpaca` adds its section to a robustness report folder
SHARED = {"eval alpaca": {"eval robustness"}, "eval robustness": {"eval alpaca"}}


def normalized(settings: JSONObject) -> JSONObject:
    """`settings` as they read back from JSON (tuples as lists, keys as strings), so that a saved and a new set compare
    equal when they are."""
    return json.loads(json.dumps(json_safe(settings), sort_keys=True, default=str))


def read_marker(path: str, flag: str) -> JSONObject | None:
    """The folder's marker ({command: {"settings", "version"}}), None where it has none."""
    marker = os.path.join(path, MARKER)
    if not os.path.isfile(marker):
        return None
    try:
        with open(marker, encoding="utf-8") as f:
            value = json.load(f)
        commands = value["commands"]
        assert isinstance(commands, dict)
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        raise OutputDirError(
            f"`{flag}` {path}: its {MARKER} is damaged, so what wrote the folder cannot be checked; give another "
            "folder."
        ) from None
    return commands


def flat(settings: JSONObject, prefix: str = "") -> JSONObject:
    """Nested settings as {'a.b.c': value}, so that a difference is named down to the field."""
    out = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(saved: JSONObject, current: JSONObject, limit: int = 4) -> str:
    """'key old -> new' for the settings that differ, down to the nested field (the first `limit`)."""
    a, b = flat(saved), flat(current)
    # a value changed first, then a setting one side lacks (an older version's marker)
    keys = sorted((k not in a or k not in b, k) for k in set(a) | set(b) if a.get(k) != b.get(k))
    keys = [k for _, k in keys]

    def short(key: str, side: JSONObject) -> str:
        text = json.dumps(side[key]) if key in side else "(unset)"
        return text if len(text) <= 60 else text[:57] + "..."

    shown = [f"{k} {short(k, a)} -> {short(k, b)}" for k in keys[:limit]]
    return "; ".join(shown) + (f"; and {len(keys) - limit} more" if len(keys) > limit else "")


def check_folder(path: str | None, command: str, settings: JSONObject, flag: str = "--output_dir") -> None:
    """Refuse, before any work, to write `command`'s results with `settings` into `path` (see the module docstring);
    reads only. A missing or empty folder is always fine."""
    found = (
        sorted(f for f in os.listdir(path) if not f.startswith(f".{MARKER}.")) if path and os.path.isdir(path) else []
    )
    if not found:
        return  # missing, empty, or another worker of one sweep marking it this instant
    commands = read_marker(path, flag)
    if commands is None:
        found = [f for f in found if not os.path.isfile(os.path.join(path, f, MARKER))]  # marked subfolders are known
        if not found:
            return
        raise OutputDirError(
            f"`{flag}` {path} holds files that no constrained-sft command marked as its own ({', '.join(found[:3])}"
            f"{', ...' if len(found) > 3 else ''}; no {MARKER}), so they could be another run's: give an empty or "
            "new folder."
        )
    others = [c for c in commands if c != command and c not in SHARED.get(command, set())]
    if others:
        raise OutputDirError(
            f"`{flag}` {path} holds the results of `constrained-sft {others[0]}`; writing `{command}` results there "
            "would replace or mix with them: give another folder."
        )
    if command in commands:
        saved = commands[command].get("settings", {})
        if saved != normalized(settings):
            raise OutputDirError(
                f"`{flag}` {path} holds `{command}` results made with other settings ({differences(saved, normalized(settings))}): "
                "give another folder, or the same settings to continue it."
            )


def mark_folder(path: str, command: str, settings: JSONObject) -> None:
    """Record `command` and its `settings` in the folder's marker (created with the folder if missing); called once
    `check_folder` has passed, as the command starts writing. Workers of one sweep may mark one folder at once: the
    marker is written only when it changes, through a temporary file of this process's own."""
    os.makedirs(path, exist_ok=True)
    commands = read_marker(path, "--output_dir") or {}
    entry = {"settings": normalized(settings), "version": VERSION}
    if commands.get(command) == entry:
        return
    commands[command] = entry
    handle, tmp = tempfile.mkstemp(prefix=f".{MARKER}.", dir=path)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            json.dump({"commands": commands}, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(path, MARKER))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def model_identities(models: list[tuple[str, str]]) -> dict[str, str]:
    """{model name: fingerprint}: which models a result is of, wherever their folders now lie
    (`data.model_fingerprint`)."""
    return {name: model_fingerprint(path) for name, path in models}
