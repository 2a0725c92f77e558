"""
The Python of `benchmarks/gpu_study.sh` (the study in a borrowed GPU window): what it asks before any work and what it
brings back, beside the script and outside the library (which never imports it), imported by the tests (the
script itself holds no Python):

    python benchmarks/study_package.py installed           # the interpreter has the package (no stack import)
    python benchmarks/study_package.py versions            # the interpreter can run the study: its versions
    python benchmarks/study_package.py attention BATCHES NAME   # ATTN: runs, and (packed) keeps documents apart
    python benchmarks/study_package.py check OUT_DIR       # before any work: OUT_DIR new, empty or the script's own
    python benchmarks/study_package.py device OUT_DIR LINE...   # the device the study runs on, in OUT_DIR's record
    python benchmarks/study_package.py pack STUDY_DIR OUT_DIR
    python benchmarks/study_package.py unpack [--check] STUDY_TGZ STUDY_DIR   # gpu_check.sh: continue a study

`pack` writes the study's results alone into `study.tar.gz` (records, comparisons, answers, verdicts, reports, each
run's log and constraint report: no weights, no prepared data; untar it as STUDY_DIR to continue elsewhere) and
copies the report and plots beside it. OUT_DIR's record (`.written-by.json`, the library's one record of what was
written: `constrained_sft.utils.written_record`, by "gpu_study.sh") holds the SHA-256 of every file the script wrote
and, as its `device` section, the device, versions and commit the study ran on (the device returns at most 8 files:
no file of its own for them). `check` refuses an OUT_DIR holding anything else, or a file of the script's changed
since (but `study.log`, which every call rewrites as it runs); an earlier version's OUT_DIR, whose `device.txt`
carried the mark and the record, is read as such. The archive is
written beside its name and renamed into place, so a stop at any moment leaves the previous `study.tar.gz` or the
new one, never a partial file.

`unpack` (gpu_check.sh's STUDY_TGZ) extracts such an archive only into an empty (or new) folder or one holding the
same study, every member checked against the layout `pack` writes and against links in the folder before anything is
written (`study_archive.py`, where the layout is).
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile

from study_archive import FILES, FOLDERS, LEGACY_FILES, RUN_FILES, TRAIN, refuse, unpack  # the archive's layout

from constrained_sft.utils.atomic import replacing
from constrained_sft.utils.content import sha256  # the package is installed: this import says so
from constrained_sft.utils.written_record import RECORD, read_record, record_written, write_section

BY = "gpu_study.sh"  # who wrote OUT_DIR, in its record
# an earlier version's OUT_DIR: device.txt, its first line the mark, its lines "written: <sha256> <name>" the record
MARK = "written by benchmarks/gpu_study.sh"
DEVICE = "device.txt"
WRITTEN = "written: "
SHOWN = {
    "report.md": "",
    "results.json": "robustness",
    "accuracy_vs_gamma.png": "robustness",
    "difference_vs_gamma.png": "robustness",
    "win_rate_vs_gamma.png": "",
}
LOG = "study.log"
OWN = (
    LOG,
    "study.tar.gz",
    *SHOWN,
)  # what the script writes beside its record (and an earlier version beside device.txt)


def recorded(out: str) -> tuple[bool, dict[str, str] | None]:
    """(whether OUT_DIR is the script's, {name: sha256} of what it wrote; None: an earlier version's folder whose
    device.txt has no record)."""
    writer, files = read_record(out)
    if writer == BY:
        return True, files
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
        if name in (RECORD, LOG) and marked and plain or name == DEVICE and legacy_marked(out):
            continue  # the record (an earlier version's device.txt); the log, which every call rewrites as it runs
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
    """The study's results into OUT_DIR (see the module docstring; made where it is not there yet, as `device`
    makes it); a line saying what came back."""
    if os.path.lexists(out) and not os.path.isdir(out):
        refuse(f"OUT_DIR {out} is a file; give a new or empty folder (or one gpu_study.sh wrote)")
    os.makedirs(out, exist_ok=True)
    with replacing(os.path.join(out, "study.tar.gz")) as partial, tarfile.open(partial, "w:gz") as tar:
        for name in (*FOLDERS, *FILES, *LEGACY_FILES):
            if os.path.exists(os.path.join(study, name)):
                tar.add(os.path.join(study, name), arcname=name)
        for root, _, names in os.walk(os.path.join(study, TRAIN)):
            for name in sorted(n for n in names if n in RUN_FILES):
                tar.add(os.path.join(root, name), arcname=os.path.relpath(os.path.join(root, name), study))
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


def legacy_marked(out: str) -> bool:
    """An earlier version's OUT_DIR: its device.txt, a plain file, begins with the script's mark."""
    path = os.path.join(out, DEVICE)
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.readline().rstrip("\n") == MARK


def mark(out: str) -> None:
    """OUT_DIR's record of the files the script wrote (its device section kept)."""
    names = [n for n in sorted(os.listdir(out)) if n in OWN and os.path.isfile(os.path.join(out, n))]
    record_written(out, BY, names)


def device(out: str, lines: list[str]) -> None:
    """The device, versions and commit the study runs on, as the record's `device` section (shown once written)."""
    os.makedirs(out, exist_ok=True)
    shown = [line for line in lines if line.strip()]
    write_section(out, "device", shown, by=BY)
    print("\n".join(shown))


def versions() -> str:
    """The line device.txt gives the software: importing what the study needs (transformers, TRL, datasets) is the
    check that this interpreter can run it."""
    import datasets
    import torch
    import transformers
    import trl

    found = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "datasets": datasets.__version__,
    }
    return " ".join(f"{name} {version}" for name, version in found.items())


def attention(name: str, packed: bool) -> None:
    """Refuse, before any work, an attention the trainer would refuse (`trainers.packing`): a name transformers does
    not know, a Hub kernel without the `kernels` package, and with packed batches (`packed`) one that would let packed
    documents attend to each other (`isolates`)."""
    from transformers import AttentionInterface
    from transformers.utils import is_kernels_available

    from constrained_sft.trainers.packing import (  # the trainers' floor: ~5 s of imports, paid here
        ISOLATING,
        hub_kernel,
        isolates,
    )

    known = ["eager", *AttentionInterface._global_mapping]
    if hub_kernel(name) and not is_kernels_available():
        refuse(
            f"ATTN '{name}' is a Hub kernel, which needs the `kernels` package: install it, or give one of {', '.join(known)}"
        )
    if not hub_kernel(name) and name not in known:
        refuse(f"ATTN '{name}': transformers knows no such attention; give one of {', '.join(known)}")
    if packed and not isolates(name):
        refuse(f"ATTN '{name}': give an attention that keeps packed documents apart: {', '.join(ISOLATING)}")


USAGE = (
    "usage: python benchmarks/study_package.py installed | versions | attention packed|padded NAME | check OUT_DIR"
    " | device OUT_DIR LINE... | pack STUDY_DIR OUT_DIR | unpack [--check] STUDY_TGZ STUDY_DIR"
)


def main(argv: list[str]) -> int:
    command, given = (argv[0], argv[1:]) if argv else ("", [])
    if command == "installed" and not given:
        pass  # reaching here is the answer: the package imports (lazily: 0.08 s, without torch)
    elif command == "versions" and not given:
        print(versions())
    elif command == "attention" and len(given) == 2 and given[0] in ("packed", "padded"):
        attention(given[1], packed=given[0] == "packed")
    elif command == "device" and given:
        device(given[0], given[1:])
    elif command == "check" and len(given) == 1:
        check(given[0])
    elif command == "pack" and len(given) == 2:
        pack(*given)
    elif command == "unpack" and len(given) in (2, 3) and given[:-2] in ([], ["--check"]):
        unpack(given[-2], given[-1], check_only=given[0] == "--check")
    else:
        refuse(USAGE)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
