"""
What the scripts beside it share about their inputs and outputs (`wheelhouse.py`, `gpu_bundle.py`): every argument
checked before any download or write, refused in one line `prog: error: ...` with exit status 2 (`refuse`,
`OneLineParser`), and the output-folder rule, the library's own (`constrained_sft.utils.written_record`): a script writes
only a new or empty folder or one it wrote itself, recognised by its record of the files it wrote (names and SHA-256),
so a folder holding anything else (a file added beside, one edited since, a symlink) is refused naming it; symlinks
are resolved before every check, and a folder that is, holds or lies inside one of the script's inputs is refused.
It builds beside the folder and moves the finished one in whole (`check_out`, `built_beside`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as md
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import NoReturn

from constrained_sft.utils.written_record import LEGACY_MARK, RECORD, foreign, record_written

PROJECT = "constrained-sft"
PYTHONS = tuple(f"3.{minor}" for minor in range(10, 16))  # the project's requires-python (>= 3.10) to the newest
PLATFORM = re.compile(r"(manylinux_\d+_\d+|musllinux_\d+_\d+|manylinux2014|linux)_(x86_64|aarch64)")
UV_GLIBCS = ("2_17", "2_28", *(f"2_{minor}" for minor in range(31, 41)))  # the manylinux tags uv resolves for
MARKS = (
    RECORD,
    LEGACY_MARK,
)  # what a script's folder holds beside what it built: its record (an earlier version's mark)
# what the scripts wrote into the folders earlier versions marked with LEGACY_MARK alone (relative paths)
LEGACY_LAYOUTS = {
    "wheelhouse.py": (r"part-\d+/[^/]+\.whl",),
    "gpu_bundle.py": (
        r"part-\d+/manifest\.json",
        r"part-\d+/[^/]+\.whl",
        r"part-\d+/assets/[^/]+",
        r"encoder/.+",
        r"smollm2/.+",
        r"sharegpt\.json",
        r"model\.gguf",
    ),  # fmt: skip
}
FREEZE_LINE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def refuse(message: str, prog: str = "wheelhouse.py") -> NoReturn:
    """One line `prog: error: message` on stderr, exit status 2: what every bad argument gets, before any work."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage block before it), like the `constrained-sft` commands'."""

    def error(self, message: str) -> NoReturn:
        refuse(message, self.prog.split()[0])


def check_out(path: str, flag: str, prog: str, inputs: dict[str, str] | None = None) -> str:
    """`path` may be written by `prog`: new, an empty folder, or a folder `prog` wrote and nobody changed since (its
    record, `constrained_sft.utils.written_record`) which it replaces whole once the new one is built. Refused: a file, a path
    under a file, a folder holding anything else (named), and a folder that is, holds or lies inside one of `inputs`
    ({flag: path} the script reads). Symlinks are resolved first; returns the real path to build at."""
    real = os.path.realpath(path)
    parent = real
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if parent != real and not os.path.isdir(parent):
        refuse(f"{flag} {path}: {parent} is a file, not a folder; give a new folder", prog)
    if os.path.exists(real) and not os.path.isdir(real):
        refuse(f"{flag} {path} is a file; give a new or empty folder (or one {prog} wrote, which it replaces)", prog)
    for name, source in (inputs or {}).items():
        where = os.path.realpath(source)
        how = "is" if where == real else "holds" if where.startswith(real + os.sep) else None
        how = how or ("lies inside" if real.startswith(where + os.sep) else None)
        if how:
            refuse(f"{flag} {path} {how} {name} {source}, which {prog} reads; give another folder", prog)
    if os.path.isdir(real) and (theirs := foreign(real, prog, legacy(prog))):
        shown = ", ".join(theirs[:3]) + (f" and {len(theirs) - 3} more" if len(theirs) > 3 else "")
        refuse(
            f"{flag} {path} holds files {prog} did not write, or changed since it did ({shown}); {prog} replaces only a "
            "folder it wrote itself: give a new or empty folder, or move those away",
            prog,
        )
    return real


def plain(name: str) -> bool:
    """A file name without a folder in it (a manifest's names stay inside the bundle)."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name and "\0" not in name


def legacy(prog: str):
    """The test of the paths `prog` wrote into a folder an earlier version marked (`LEGACY_LAYOUTS`)."""
    patterns = [re.compile(p) for p in LEGACY_LAYOUTS.get(prog, ())]
    return lambda rel: any(p.fullmatch(rel.replace(os.sep, "/")) for p in patterns)


@contextlib.contextmanager
def built_beside(out: str, prog: str) -> Iterator[str]:
    """A new folder beside `out` (the real path `check_out` returned) to build in: when the block ends, its files
    recorded as `prog`'s and the folder moved to `out` whole (`out`, absent, empty or `prog`'s, is removed only then,
    after checking again that it holds nothing else); removed if the block raises, so a failed or interrupted build
    leaves `out` as it was."""
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    folder = tempfile.mkdtemp(dir=parent, prefix=f".{prog.removesuffix('.py')}-")
    try:
        yield folder
        record_written(folder, prog)
        if os.path.isdir(out):
            if theirs := foreign(out, prog, legacy(prog)):  # added while it was built
                refuse(f"{out} gained files while it was built ({', '.join(theirs[:3])}); nothing replaced", prog)
            shutil.rmtree(out)
        os.replace(folder, out)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def check_python(python: str, prog: str) -> None:
    if python not in PYTHONS:
        refuse(f"--python {python!r}: give the target's Python as one of {', '.join(PYTHONS)}", prog)


def machine(platform: str, prog: str = "wheelhouse.py") -> str:
    """The CPU of a Linux wheel platform tag (x86_64 or aarch64); any other tag is refused."""
    match = PLATFORM.fullmatch(platform)
    if match is None:
        refuse(
            f"--platform {platform!r}: give a Linux wheel platform tag such as manylinux_2_28_x86_64, "
            "manylinux2014_aarch64, musllinux_1_2_x86_64 or linux_x86_64 (x86_64 or aarch64)",
            prog,
        )
    return match.group(2)


def check_part_mib(part_mib: float, prog: str) -> None:
    if not (math.isfinite(part_mib) and part_mib >= 1):
        refuse(f"--part-mib {part_mib}: give a finite size in MiB >= 1 (a part holds whole wheels)", prog)


def read_freeze(path: str, prog: str = "wheelhouse.py") -> dict[str, str]:
    """{package: version} of the target's `pip freeze` (`name==version`; `name @ url` and `-e` lines are present
    packages of unknown version); a file in any other form (a `pip list` table) is refused naming its line."""
    if not os.path.isfile(path):
        refuse(f"--have {path}: no such file (write it on the target with `pip freeze > FILE`)", prog)
    pins: dict[str, str] = {}
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            text = line.split("#")[0].strip()
            if not text:
                continue
            if text.startswith("-e ") or " @ " in text:
                pins[canonical(text.removeprefix("-e ").split(" @ ")[0].split("#egg=")[-1])] = ""
                continue
            match = FREEZE_LINE.fullmatch(text)
            if match is None:
                refuse(
                    f"--have {path} line {n} {text[:40]!r} is not `pip freeze` output (name==version); write it on "
                    "the target with `pip freeze > FILE`",
                    prog,
                )
            pins[canonical(match.group(1))] = match.group(2).split("+")[0]
    if not pins:
        refuse(f"--have {path} lists no package; write it on the target with `pip freeze > FILE`", prog)
    return pins


def check_extras(extras: list[str], also: list[str], prog: str = "wheelhouse.py") -> None:
    known = md.metadata(PROJECT).get_all("Provides-Extra") or []
    if unknown := [e for e in extras if e not in known]:
        refuse(f"--extras {','.join(unknown)}: {PROJECT} has the extras {', '.join(sorted(known))}", prog)
    for name in also:
        try:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
                raise md.PackageNotFoundError(name)
            md.distribution(name)
        except md.PackageNotFoundError:
            refuse(f"--also {name or repr(name)}: not installed here (give the name of a package this environment has: "
                   "the wheels carried are its)", prog)  # fmt: skip


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def uv_platform(platform: str, prog: str = "wheelhouse.py") -> str:
    """uv's name of a Linux wheel platform tag (`uv pip compile --python-platform`); another tag is refused."""
    cpu = machine(platform, prog)
    family = PLATFORM.fullmatch(platform).group(1)  # manylinux_2_28, musllinux_1_2, manylinux2014 or linux
    if family.startswith("manylinux_"):
        if (glibc := family.removeprefix("manylinux_")) not in UV_GLIBCS:
            refuse(f"--platform {platform!r}: give manylinux_X_Y with X_Y one of {', '.join(UV_GLIBCS)}", prog)
        return f"{cpu}-manylinux_{glibc}"
    names = {"musllinux": "unknown-linux-musl", "manylinux2014": "manylinux2014", "linux": "unknown-linux-gnu"}
    return f"{cpu}-{names[family.split('_')[0]]}"


def check_arguments(python: str, platform: str, have: str | None, part_mib: float, extras=(), also=(),
                    prog: str = "wheelhouse.py") -> None:  # fmt: skip
    """Every argument of a wheelhouse checked before anything is downloaded or written (see `refuse`)."""
    check_python(python, prog)
    uv_platform(platform, prog)
    if have is not None:
        read_freeze(have, prog)
    check_part_mib(part_mib, prog)
    check_extras(list(extras), list(also), prog)
    try:  # the resolver (a dev dependency, `make setup`), needed before anything is downloaded
        from uv import find_uv_bin

        find_uv_bin()
    except (ImportError, FileNotFoundError):
        refuse(
            "the uv package is not installed here; it resolves the wheelhouse: `pip install uv` (or `make setup`)",
            prog,
        )
