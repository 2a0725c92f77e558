"""
A study archive's layout and its unpacking (`benchmarks/study_package.py pack` writes it, `unpack` reads it, for
gpu_check.sh: a study continued from what an earlier GPU window brought back), outside the library.

The layout is what `pack` writes and nothing else: the study's result folders (`FOLDERS`, whole), its top-level files
(`FILES`, and an earlier version's marker), and under `train/` each run's small files (`RUN_FILES`, and those an
earlier archive carried: no weights, no prepared data). `unpack` checks the whole archive before it writes anything, and refuses naming the member and why:

- every member is a plain file or a folder with a relative name inside STUDY_DIR (no absolute name, no `..`, no link
  or device), named once (a second member of one name would replace the first), and inside the layout;
- STUDY_DIR is new, empty, or holds the same study (its record names the archive's settings);
- no member would be written through a link in STUDY_DIR (a folder of the layout that is a link to elsewhere), and
  none where STUDY_DIR holds something else (a file with other bytes, a link, a folder where a file goes): files the
  folder holds with the same bytes are left as they are, and only the files it lacks are extracted (with tarfile's
  `data` filter too).

`--check` does every check and writes nothing (gpu_check.sh asks it before any work).
"""

from __future__ import annotations

import json
import os
import sys
import tarfile
from pathlib import Path
from typing import NoReturn

FOLDERS = ("runs", "robustness", "generations", "judging", "exits")
FILES = (
    "study.json",
    "report.md",
    "report.html",
    "timings.json",
    ".written-by.json",
    "instructions.jsonl",
    "study-id.txt",
)
LEGACY_FILES = ("written_by.json",)  # an earlier version's marker of the study, packed where the folder holds one
TRAIN = "train"
RUN_FILES = ("constraints.json", "trainer_state.json", "training_args.json", "run.json")  # per run: no weights
# what the H100 window's hand-packed archive (2026-11-27, ../shared/gpu/h100-seed0) carried beside them: no weights
LEGACY_RUN_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "README.md",
    "data.json",
)
# the study folder's record, which names the commands that wrote it; an earlier version's marker beside it
MARKERS = (".written-by.json", "written_by.json")

UNPACKS = "gpu_check.sh"  # who unpacks an archive (its refusals name it)
AGAIN = "give the study.tar.gz an earlier window brought back"


def refuse(message: str, prog: str = "gpu_study.sh") -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def parts_of(name: str) -> list[str]:
    """A member's name as its parts, without "." and empty ones (`./runs/` and `runs` are one folder)."""
    return [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]


def in_layout(parts: list[str], folder: bool) -> bool:
    """Whether a member of these name parts is one `pack` writes: a result folder or what is under it, a top-level
    file, or a folder under `train/` and a run's small file there."""
    if not parts or parts[0] in FOLDERS:  # the archive's root folder ("."), or a result folder's own
        return folder or bool(parts)
    if len(parts) == 1:
        return parts[0] in (*FILES, *LEGACY_FILES) and not folder or parts[0] == TRAIN and folder
    return parts[0] == TRAIN and (folder or parts[-1] in (*RUN_FILES, *LEGACY_RUN_FILES))


def checked_members(tar: tarfile.TarFile, archive: str) -> list[tarfile.TarInfo]:
    """The archive's members, each a plain file or folder with a relative name that stays inside, named once and in
    the study layout (`in_layout`); else refused naming the first member that is not and why."""
    members, seen = tar.getmembers(), set()
    for m in members:
        parts = parts_of(m.name)
        problem = (
            "a link"
            if m.issym() or m.islnk()
            else "an absolute name"
            if m.name.startswith("/")
            else "a name with '..'"
            if ".." in parts
            else "no plain file"
            if not (m.isfile() or m.isdir())
            else "named twice (the second would replace the first)"
            if "/".join(parts) in seen
            else None
            if in_layout(parts, m.isdir())
            else f"outside a study's layout (its result folders {', '.join(FOLDERS)}, its files, and each run's "
            f"{', '.join(RUN_FILES)} under {TRAIN}/)"
        )
        if problem:
            refuse(f"STUDY_TGZ {archive}: its member {m.name!r} is {problem}; not a study archive: {AGAIN}", UNPACKS)
        seen.add("/".join(parts))
    return members


def through_link(study: str, name: str) -> str | None:
    """The first folder on the way from `study` to the member `name` that is a link in STUDY_DIR, else None."""
    parts = parts_of(name)
    for depth in range(1, len(parts)):
        path = os.path.join(study, *parts[:depth])
        if os.path.islink(path):
            return path
    return None


def clashes(tar: tarfile.TarFile, members: list[tarfile.TarInfo], study: str) -> list[str]:
    """The members `study` already holds otherwise: a file with other bytes, a link or a folder where a file goes."""
    found = []
    for m in members:
        target = os.path.join(study, m.name)
        if not os.path.lexists(target):
            continue
        if os.path.islink(target) or (os.path.isdir(target) != m.isdir()):
            found.append(m.name)
        elif m.isfile():
            with open(target, "rb") as f, tar.extractfile(m) as given:  # type: ignore[union-attr]
                if f.read() != given.read():
                    found.append(m.name)
    return found


def study_settings(text: bytes | str) -> object:
    """The study's settings in the text of its record (or an earlier version's `written_by.json`); None where it
    names no study."""
    try:
        return json.loads(text)["commands"]["study"]["settings"]
    except (ValueError, KeyError, TypeError):
        return None


def archive_settings(tar: tarfile.TarFile, members: list[tarfile.TarInfo], archive: str) -> object:
    """The study settings the archive's record names; refused where it names none."""
    marked_in = [next((m for m in members if parts_of(m.name) == [n] and m.isfile()), None) for n in MARKERS]
    for m in marked_in:
        given = tar.extractfile(m) if m is not None else None
        if given is not None and (settings := study_settings(given.read())) is not None:
            return settings
    refuse(f"STUDY_TGZ {archive}: not a study archive (its .written-by.json names no study); {AGAIN}", UNPACKS)


def check_target(study: str, settings: object) -> None:
    """STUDY_DIR new, empty, or holding the study of `settings`."""
    if not (os.path.isdir(study) and os.listdir(study)):
        return
    there = [Path(study, n) for n in MARKERS if Path(study, n).is_file() and not Path(study, n).is_symlink()]
    if next((t for m in there if (t := study_settings(m.read_bytes())) is not None), None) != settings:
        refuse(
            f"STUDY_DIR {study} holds another study, or files that are not a study's (its .written-by.json names no "
            "study with the archive's settings); give a new or empty folder, or the folder of the same study",
            UNPACKS,
        )


def unpack(archive: str, study: str, check_only: bool = False) -> None:
    """Continue a study from `archive` in the folder `study` (see the module docstring)."""
    if not os.path.isfile(archive):
        refuse(f"STUDY_TGZ {archive}: no such file; {AGAIN}", UNPACKS)
    if os.path.lexists(study) and not os.path.isdir(study):
        refuse(f"STUDY_DIR {study} is a file; give a new or empty folder, or the folder of the same study", UNPACKS)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = checked_members(tar, archive)
            check_target(study, archive_settings(tar, members, archive))
            for m in members:
                if (link := through_link(study, m.name)) is not None:
                    refuse(
                        f"STUDY_DIR {study}: {link} is a link, and STUDY_TGZ's member {m.name!r} would be written "
                        "through it to another place; nothing is written: replace the link by the folder, or give a "
                        "new or empty STUDY_DIR",
                        UNPACKS,
                    )
            if found := clashes(tar, members, study):
                shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
                refuse(
                    f"STUDY_DIR {study} already holds {shown} with other contents than STUDY_TGZ's; nothing is "
                    "written over: continue the folder as it is (no STUDY_TGZ), or give a new or empty STUDY_DIR",
                    UNPACKS,
                )
            if not check_only:
                os.makedirs(study, exist_ok=True)
                todo = [m for m in members if not os.path.lexists(os.path.join(study, m.name))]
                tar.extractall(study, members=todo, filter="data")
    except (tarfile.TarError, EOFError, OSError) as error:
        refuse(f"STUDY_TGZ {archive}: not a readable study archive ({type(error).__name__}); {AGAIN}", UNPACKS)
