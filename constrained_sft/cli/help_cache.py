"""
`--help` without the training stack. A command's help lists the fields of its dataclasses, and the training ones
extend transformers' `TrainingArguments`, whose module imports torch and PEFT: seconds before a line is printed
(TRL's own `trl sft --help` pays the same; the performance guide has the figures). So the help text a command prints
is kept, once built, in `<cache>/help/<key>.txt` and printed from there.

The key holds everything the text depends on: the command line, the terminal's width, this package's version and the
modification times of its source files (an edited checkout is a new key), the versions of the packages whose fields
or help it shows, and the size and modification time of every file the command line names (a recipe chooses the task
whose fields are shown). Anything else (no cache folder, a write that fails) falls back to building the help as before; the first help
of a new install builds it (`make setup` builds every command's once). `CONSTRAINED_SFT_HELP_CACHE=0` turns it off, and
so does a variant registered from outside the package before the command runs (`foreign_variants`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from importlib.resources import files as package_files

from ..utils.cache import cache_root
from ..utils.files import write_text
from ..version import VERSION

# the distributions whose dataclass fields or help strings a command's help shows
SHOWN = ("transformers", "trl", "peft", "accelerate", "datasets")
PACKAGE = str(package_files("constrained_sft"))  # the installed package, whose sources the key hashes


def wants_help(argv: list[str]) -> bool:
    """Whether argparse would print a help for `argv` (`-h` / `--help` before a `--`)."""
    for arg in argv:
        if arg == "--":
            return False
        if arg in ("-h", "--help"):
            return True
    return False


def key(argv: list[str]) -> str:
    """A digest of everything the help text of `argv` depends on (see the module docstring)."""
    # argparse wraps help to the terminal's width: a text built for one width is kept for that width
    width = shutil.get_terminal_size().columns
    parts: dict[str, object] = {"argv": argv, "version": VERSION, "python": sys.version_info[:2], "columns": width}
    for name in SHOWN:
        try:
            parts[name] = version(name)
        except PackageNotFoundError:
            parts[name] = None
    sources = []
    for folder, _, files in os.walk(PACKAGE):  # ~100 stat calls: an edited checkout gets a new key
        sources += [(f, os.stat(os.path.join(folder, f)).st_mtime_ns) for f in files if f.endswith(".py")]
    parts["sources"] = sorted(sources)
    parts["files"] = [(a, os.stat(a).st_size, os.stat(a).st_mtime_ns) for a in argv if os.path.isfile(a)]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


REGISTRIES = {  # module -> its registries of variants, whose names and help a command's help shows
    "constrained_sft.constraints": ("MODES", "DUAL_OPTIMIZERS"),
    "constrained_sft.evaluation.alpaca.judge_registry": ("JUDGES",),
    "constrained_sft.sweep.objectives": ("SWEEP_OBJECTIVES",),
}


def foreign_variants() -> bool:
    """Whether a registry already loaded in this process holds a variant from outside the package (a program that
    registered a mode, dual optimizer, judge or objective of its own before running a command): its help must show
    it, and no key can know of it without loading the registries, so such a help is built, not read."""
    for module, names in REGISTRIES.items():
        if (loaded := sys.modules.get(module)) is None:
            continue  # not loaded: nothing can have registered with it
        variants = (cls for name in names for cls in getattr(loaded, name).values())
        if any(not cls.__module__.startswith("constrained_sft.") for cls in variants):
            return True
    return False


def cached_help(argv: list[str], build: Callable[[], int]) -> int:
    """Print the help of `argv` from the cache, or `build` it (argparse prints it and exits 0) and keep it."""
    if os.environ.get("CONSTRAINED_SFT_HELP_CACHE", "1") == "0" or foreign_variants():
        return build()
    path = os.path.join(cache_root(), "help", f"{key(argv)}.txt")
    with contextlib.suppress(OSError):
        with open(path, encoding="utf-8") as f:
            sys.stdout.write(f.read())
        raise SystemExit(0)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            code = build()
    except SystemExit as done:
        sys.stdout.write(out.getvalue())
        if done.code in (0, None):  # argparse's help: kept; an error is never cached
            with contextlib.suppress(OSError):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                write_text(path, out.getvalue())
        raise
    sys.stdout.write(out.getvalue())
    return code
