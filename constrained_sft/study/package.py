"""
The Python of `benchmarks/gpu_study.sh` (the study in a borrowed GPU window): what it asks before any work and what it
brings back, as package code the tests import (the script itself holds no Python):

    python -m constrained_sft.study.package installed           # the interpreter has the package (no stack import)
    python -m constrained_sft.study.package versions            # the interpreter can run the study: its versions
    python -m constrained_sft.study.package attention NAME      # BATCHES=packed: NAME keeps packed documents apart
    python -m constrained_sft.study.package check OUT_DIR       # before any work: OUT_DIR new, empty or the script's own
    python -m constrained_sft.study.package pack STUDY_DIR OUT_DIR

`pack` writes the study's results alone into `study.tar.gz` (records, comparisons, answers, verdicts, reports, each
run's log and constraint report: no weights, no prepared data; untar it as STUDY_DIR to continue elsewhere) and
copies the report and plots beside it. The device returns at most 8 files, so OUT_DIR holds no record file of its
own: `device.txt` (the script's mark on its first line) ends with the SHA-256 of every other file the script wrote,
and `check` refuses an OUT_DIR holding anything else, or a file of the script's changed since (but `study.log`, which
every call rewrites as it runs). The archive is
written beside its name and renamed into place, so a stop at any moment leaves the previous `study.tar.gz` or the
new one, never a partial file.
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
import tempfile
from typing import NoReturn

from ..utils.content import sha256

MARK = "written by benchmarks/gpu_study.sh"  # device.txt's first line
DEVICE = "device.txt"
WRITTEN = "written: "  # device.txt's lines naming what the script wrote: "written: <sha256> <name>"
FOLDERS = ("runs", "robustness", "generations", "judging", "exits")
FILES = ("study.json", "report.md", "report.html", "timings.json", "written_by.json", "instructions.jsonl")
RUN_FILES = ("constraints.json", "trainer_state.json", "training_args.json", "run.json")  # per run: no weights
SHOWN = {"report.md": "", "results.json": "robustness", "accuracy_vs_gamma.png": "robustness",
         "difference_vs_gamma.png": "robustness", "win_rate_vs_gamma.png": ""}  # fmt: skip
LOG = "study.log"
OWN = (LOG, "study.tar.gz", *SHOWN)  # what an earlier version's OUT_DIR held beside device.txt


def refuse(message: str) -> NoReturn:
    print(f"gpu_study.sh: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def recorded(out: str) -> tuple[bool, dict[str, str] | None]:
    """(whether device.txt carries the mark, {name: sha256} of its record; None: an earlier version's, which has
    none)."""
    path = os.path.join(out, DEVICE)
    if os.path.islink(path) or not os.path.isfile(path):
        return False, None
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    if not lines or lines[0] != MARK:
        return False, None
    written = [line[len(WRITTEN) :].split(" ", 1) for line in lines if line.startswith(WRITTEN)]
    return True, ({name: digest for digest, name in written} if written else None)


def check(out: str) -> None:
    """Refuse OUT_DIR unless new, empty, or holding only what the script wrote there, unchanged."""
    if os.path.lexists(out) and not os.path.isdir(out):
        refuse(f"OUT_DIR {out} is a file; give a new or empty folder (or one gpu_study.sh wrote)")
    if not os.path.isdir(out) or not os.listdir(out):
        return
    marked, files = recorded(out)
    theirs = []
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        plain = os.path.isfile(path) and not os.path.islink(path)
        if name in (DEVICE, LOG) and marked and plain:
            continue  # the mark; the log, which every call rewrites as it runs
        if not marked or not plain:
            theirs.append(name)
        elif files is None:
            theirs += [] if name in OWN else [name]  # an earlier version's folder: its names
        elif name not in files or sha256(path) != files[name]:
            theirs.append(name)
    if theirs:
        shown = ", ".join(theirs[:3]) + (f" and {len(theirs) - 3} more" if len(theirs) > 3 else "")
        refuse(
            f"OUT_DIR {out} holds files gpu_study.sh did not write, or changed since it did ({shown}); give a new or "
            "empty folder (or one gpu_study.sh wrote), or move those away"
        )


def pack(study: str, out: str) -> None:
    """The study's results into OUT_DIR (see the module docstring); a line saying what came back."""
    handle, partial = tempfile.mkstemp(prefix=".study.tar.gz.", dir=out)
    os.close(handle)
    try:
        with tarfile.open(partial, "w:gz") as tar:
            for name in (*FOLDERS, *FILES):
                if os.path.exists(os.path.join(study, name)):
                    tar.add(os.path.join(study, name), arcname=name)
            for root, _, names in os.walk(os.path.join(study, "train")):
                for name in sorted(n for n in names if n in RUN_FILES):
                    tar.add(os.path.join(root, name), arcname=os.path.relpath(os.path.join(root, name), study))
        os.replace(partial, os.path.join(out, "study.tar.gz"))
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    for name, folder in SHOWN.items():
        source = os.path.join(study, folder, name)
        if os.path.isfile(source):
            shutil.copy(source, os.path.join(out, name))
    mark(out)
    kept = sorted(f for f in os.listdir(out) if os.path.isfile(os.path.join(out, f)))
    size = sum(os.path.getsize(os.path.join(out, f)) for f in kept)
    runs = os.path.join(study, "runs")
    records = len(os.listdir(runs)) if os.path.isdir(runs) else 0
    print(f"results in {out}: {len(kept)} files, {size / 2**20:.1f} MiB ({', '.join(kept)}); {records} run record(s)")


def mark(out: str) -> None:
    """device.txt's record of the files the script wrote (its mark and device lines kept, the record replaced)."""
    path = os.path.join(out, DEVICE)
    with open(path, encoding="utf-8", errors="replace") as f:
        head = [line for line in f.read().splitlines() if not line.startswith(WRITTEN)]
    names = [n for n in sorted(os.listdir(out)) if n in OWN and os.path.isfile(os.path.join(out, n))]
    lines = head + [f"{WRITTEN}{sha256(os.path.join(out, n))} {n}" for n in names]
    handle, tmp = tempfile.mkstemp(prefix=".device.", dir=out)
    with os.fdopen(handle, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def versions() -> str:
    """The line device.txt gives the software: importing what the study needs (transformers, TRL, datasets) is the
    check that this interpreter can run it."""
    import datasets
    import torch
    import transformers
    import trl

    found = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
             "trl": trl.__version__, "datasets": datasets.__version__}  # fmt: skip
    return " ".join(f"{name} {version}" for name, version in found.items())


def attention(name: str) -> None:
    """Refuse an attention that would let packed documents attend to each other (the trainer's own rule,
    `trainers.packing.isolates`), before any work."""
    from ..trainers.packing import ISOLATING, isolates  # the trainers' floor: ~5 s of imports, paid only here

    if not isolates(name):
        refuse(f"ATTN '{name}': give an attention that keeps packed documents apart: {', '.join(ISOLATING)}")


USAGE = (
    "usage: python -m constrained_sft.study.package installed | versions | attention NAME | check OUT_DIR"
    " | pack STUDY_DIR OUT_DIR"
)


def main(argv: list[str]) -> int:
    command, given = (argv[0], argv[1:]) if argv else ("", [])
    if command == "installed" and not given:
        pass  # reaching here is the answer: the package imports (lazily: 0.08 s, without torch)
    elif command == "versions" and not given:
        print(versions())
    elif command == "attention" and len(given) == 1:
        attention(given[0])
    elif command == "check" and len(given) == 1:
        check(given[0])
    elif command == "pack" and len(given) == 2:
        pack(*given)
    else:
        refuse(USAGE)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
