"""
A comparison's folder (a study's `--study_dir`, a sweep's `--sweep_dir`), opened the one way both open it: refused in
one line, before any work, when its data changed since its runs trained (`check_same_data`) or its marker says
another command or other settings wrote it (`utils.output_folders.check_folder`); then marked, by one writer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..tasks import AnyRecipe
from ..tasks.training import data_identity
from ..trainers.resume import RUN_JSON
from ..utils.content import same_source
from ..utils.output_folders import OutputDirError, check_folder, mark_folder, migrated_line, saved_settings
from ..utils.types import JSONObject, JSONRead


@dataclass(frozen=True)
class CheckedFolder:
    """A comparison folder that passed its checks, not yet written: `mark` writes its marker (and says what an
    earlier version's marker lacked) once the caller has checked what it reads from it."""

    root: str
    command: str
    settings: JSONObject
    flag: str
    saved: JSONRead | None  # as the marker holds them (`saved_settings`)
    migrated: list[str]

    def mark(self) -> None:
        if self.migrated and self.saved is not None:
            print(migrated_line(self.flag, self.root, self.saved, self.migrated))
        mark_folder(self.root, self.command, self.settings)


def check_comparison_folder(
    root: str, command: str, settings: JSONObject, flag: str, recipes: Mapping[str, AnyRecipe]
) -> CheckedFolder:
    """The folder's checks, before any work and writing nothing: its data (`check_same_data`: before the settings, the
    clearer refusal), then its marker; an earlier version's data fields are vouched for by the data check."""
    saved = saved_settings(root, command, flag)
    check_same_data(saved, recipes, root, flag)
    migrated = check_folder(root, command, settings, flag, vouch=lambda key: ".data.files." in key)
    return CheckedFolder(root, command, settings, flag, saved, migrated)


def check_same_data(saved: JSONRead | None, recipes: Mapping[str, AnyRecipe], root: str, flag: str) -> None:
    """Refuse in one line, before any work, to continue a comparison folder (`root`, a study's or a sweep's) whose
    data has changed since its runs trained: against the content ids its marker's settings (`saved`) recorded, and
    against those its runs recorded (`run.json`; an earlier version's marker records none, its runs a fingerprint of
    their own: `utils.content.same_source`)."""
    if not saved:
        return
    for arm, recipe in recipes.items():
        current = data_identity(recipe.script)
        recorded = ((saved.get("arms") or {}).get(arm) or {}).get("data") or {}
        for field, value in (recorded.get("files") or {}).items():
            if (current.get("files") or {}).get(field) != value:
                raise data_changed(root, flag, current.get(field), value, (current.get("files") or {}).get(field))
    current = data_identity(next(iter(recipes.values())).script)  # every arm trains on the same data (the twin check)
    for path in run_files(root):
        try:
            with open(path, encoding="utf-8") as f:
                files = (json.load(f).get("data") or {}).get("files") or {}
        except (OSError, ValueError, AttributeError):
            continue  # a damaged run.json is the run's own refusal, when it resumes
        for field, value in files.items():
            if field in current and not same_source(value, current[field]):
                now = (current.get("files") or {}).get(field)
                raise data_changed(root, flag, current[field], value, now, os.path.dirname(path))


def data_changed(
    root: str, flag: str, source: object, recorded: str, now: str | None, run: str | None = None
) -> OutputDirError:
    """The refusal of a comparison folder whose data changed (see `check_same_data`)."""
    who = f"its run {os.path.relpath(run, root)}" if run else "it"
    kind = "content" if str(recorded).startswith("sha256:") else "an earlier version's fingerprint"
    return OutputDirError(
        f"`{flag}` {root}: {who} trained on {source!r} as it was then ({kind} {recorded}); it holds other data now "
        f"({now or 'gone'}), so the runs left would train on other rows than the ones recorded. Give a new `{flag}` "
        f"for the changed data, or move {root} away to start over."
    )


def run_files(root: str, depth: int = 4) -> list[str]:
    """The `run.json` of every trained run below `root` (a study's `train/<arm>/seed<s>/`, a sweep's trials and
    finals), `depth` folders down at most."""
    found = []
    base = root.rstrip(os.sep).count(os.sep)
    for folder, dirs, files in os.walk(root):
        if folder.count(os.sep) - base >= depth:
            dirs[:] = []
        dirs[:] = [d for d in dirs if not d.startswith("checkpoint-")]
        if RUN_JSON in files:
            found.append(os.path.join(folder, RUN_JSON))
    return sorted(found)
