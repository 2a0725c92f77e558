"""
A wheelhouse: every wheel `constrained-sft` needs at run time but torch (and CUDA), for a target Python and platform,
pinned to the lock, so a machine without network installs the package with `pip install --no-index` and keeps its
own torch (a lent GPU machine: its CUDA torch stays).

    python scripts/wheelhouse.py OUT [--python 3.12] [--platform manylinux_2_28_x86_64] [--have FREEZE.txt]
                                 [--extras offline] [--also gguf] [--part-mib 56]
    bash scripts/install_wheelhouse.sh OUT            # on the target: pip install --no-index from every part

`make wheelhouse` runs the first with the variables of the same names. The dependency closure is uv's resolution
(`uv pip compile --python-version --python-platform`) for the target, with the lock's pins as constraints and torch
overridden out (the target keeps its own, and its CUDA stack is never resolved); `--have` (the target's `pip freeze`)
leaves out what the target already has, so what is carried is what is missing. pip downloads each pinned wheel for
the target (`pip download --platform --python-version --no-deps`). The wheels go into `part-1/`, `part-2/`, ... of at
most `--part-mib` MiB each (a part per transfer where a transfer is capped); the size of each part and of the whole
is printed. What is written here by hand is only that: no tool carries wheels through a 64 MiB keyhole. Every
argument and the output folder are checked first, by the rules `script_inputs.py` holds for the scripts here.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_inputs import (  # noqa: E402
    PROJECT,
    OneLineParser,
    built_beside,
    canonical,
    check_arguments,
    check_out,
    machine,
    read_freeze,
    refuse,
    uv_platform,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK = os.path.join(ROOT, "requirements", "lock-cpu.txt")
LEFT_OUT = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")  # the target's own torch and its CUDA stack stay


def read_pins(path: str) -> dict[str, str]:
    """{package: version} of a lock or `pip freeze` file (`name==version` lines; other lines ignored)."""
    pins = {}
    with open(path) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if "==" in line and not line.startswith("-"):
                name, version = line.split("==", 1)
                pins[canonical(name)] = version.split("+")[0].strip()
    return pins


def closure(extras: list[str], python: str, also: tuple[str, ...] = (), platform: str = "manylinux_2_28_x86_64"):
    """{package: version} of everything `constrained-sft[extras]` (and `also`) needs on the target: uv's resolution
    for its Python and platform, the lock's pins as constraints, torch overridden out (no environment matches it)."""
    from uv import find_uv_bin  # a dev dependency (make setup)

    with tempfile.TemporaryDirectory() as scratch:
        override, wanted, out = (os.path.join(scratch, n) for n in ("override.txt", "also.in", "resolved.txt"))
        with open(override, "w") as f, open(wanted, "w") as g:
            f.write('torch; python_version < "0"\n')  # never installed: the target's torch stays
            g.write("".join(f"{name}\n" for name in also))
        command = [find_uv_bin(), "pip", "compile", "--quiet", "--python-version", python, "--python-platform",
                   uv_platform(platform), "-c", LOCK, "--override", override, os.path.join(ROOT, "pyproject.toml"),
                   wanted, "-o", out, *(f"--extra={extra}" for extra in extras)]  # fmt: skip
        if (done := subprocess.run(command, capture_output=True, text=True)).returncode != 0:
            raise SystemExit(f"wheelhouse.py: uv could not resolve the target's dependencies: {done.stderr[-800:]}")
        return read_pins(out)


def download(packages: dict[str, str], out: str, python: str, platform: str, part_mib: float | None = None) -> None:
    """Binary wheels of `packages` for the target, pinned, without their dependencies (the closure has them);
    a package with no wheel for the target is built here (pure Python) with `pip wheel`. A wheel larger than a part
    (`part_mib`) stops it at once, naming the wheel."""
    tag = python.replace(".", "")[:4]
    cpu = machine(platform)
    base = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest", out,
            "--python-version", python, "--implementation", "cp", "--abi", f"cp{tag}", "--abi", "abi3", "--abi", "none"]  # fmt: skip
    for tag_platform in (platform, f"manylinux2014_{cpu}", f"manylinux_2_17_{cpu}", f"linux_{cpu}", "any"):
        base += ["--platform", tag_platform]
    for name, version in sorted(packages.items()):
        spec = f"{name}=={version}"
        if subprocess.run([*base, spec], capture_output=True, text=True).returncode != 0:
            built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", out,
                                    spec], capture_output=True, text=True)  # fmt: skip
            if built.returncode != 0:
                raise SystemExit(
                    f"wheelhouse: no wheel of {spec} for Python {python} / {platform}: {built.stderr[-500:]}"
                )
        if part_mib is not None:
            for wheel in os.listdir(out):
                if os.path.getsize(os.path.join(out, wheel)) > part_mib * 2**20:
                    size = os.path.getsize(os.path.join(out, wheel)) / 2**20
                    refuse(f"--part-mib {part_mib}: {wheel} is {size:.1f} MiB; give --part-mib >= {math.ceil(size)}")


def project_wheel(out: str, built: str | None = None) -> None:
    """The project's own wheel: `built` (a wheel built elsewhere, e.g. from the sdist in CI) or built here."""
    if built:
        shutil.copy(built, out)
        return
    # setuptools copies into build/lib but never removes a module deleted since: a stale one would ship in the wheel
    shutil.rmtree(os.path.join(ROOT, "build"), ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", out, ROOT], check=True)  # fmt: skip


def split(files: list[str], out: str, part_mib: float, subfolder: str = "") -> list[tuple[str, int]]:
    """Move `files` into `out`/part-1/, part-2/, ... (into `subfolder` of each) so that no part holds more than
    `part_mib` MiB (largest first, each into the first part with room; parts already there are filled first);
    [(part, bytes it holds now)]."""
    limit = part_mib * 2**20

    def used(part: str) -> int:
        return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(part) for f in fs)

    parts = sorted((p for p in os.listdir(out) if p.startswith("part-")), key=lambda p: int(p.split("-")[1]))
    sizes = {os.path.join(out, p): used(os.path.join(out, p)) for p in parts}
    for path in sorted(files, key=lambda f: -os.path.getsize(f)):
        size = os.path.getsize(path)
        if size > limit:
            raise SystemExit(f"wheelhouse: {path} ({size / 2**20:.1f} MiB) is larger than a part ({part_mib} MiB).")
        part = next((p for p, held in sizes.items() if held + size <= limit), None)
        if part is None:
            part = os.path.join(out, f"part-{len(sizes) + 1}")
            sizes[part] = 0
        os.makedirs(os.path.join(part, subfolder), exist_ok=True)
        os.replace(path, os.path.join(part, subfolder, os.path.basename(path)))
        sizes[part] += size
    return list(sizes.items())


def older_than(present: str | None, pinned: str) -> bool:
    """Whether the target's version of a package is older than the lock's: the lock's wheel is carried and replaces
    it (a lent H100 had transformers 5.17, which this package cannot import with: the versions CI tested go). A
    version of unknown form (an `@ url` install) is kept."""
    from packaging.version import InvalidVersion, Version

    if not present:
        return False
    try:
        return Version(present) < Version(pinned)
    except InvalidVersion:
        return False


def collect(staging: str, python: str, platform: str, have: str | None, extras: list[str], also=(), project=None,
            part_mib: float | None = None):  # fmt: skip
    """Every wheel the target needs but has (`have`), and the project's own, downloaded into `staging`; prints what
    is left out. Returns the wheel paths."""
    needed = closure(extras, python, tuple(also), platform)
    lock = read_pins(LOCK)
    present = read_freeze(have) if have else {}
    pinned = {name: lock.get(name, version) for name, version in needed.items() if name != canonical(PROJECT)}
    older = {n for n, v in pinned.items() if older_than(present.get(n), v)}
    carried = {n: v for n, v in pinned.items() if not LEFT_OUT.match(n) and (n not in present or n in older)}
    download(carried, staging, python, platform, part_mib)
    project_wheel(staging, project)
    left = [
        "torch and its CUDA stack",
        *sorted(n for n in pinned if LEFT_OUT.match(n) or n in present and n not in older),
    ]
    print(f"{len(carried) + 1} wheels for Python {python} / {platform}{' [' + ','.join(extras) + ']' if extras else ''}"
          f"; left out (the target's own): {', '.join(left)}"
          + (f"; carried over the target's older versions: {', '.join(f'{n} {present[n]} -> {pinned[n]}' for n in sorted(older))}"
             if older else ""))  # fmt: skip
    return [os.path.join(staging, f) for f in os.listdir(staging) if f.endswith(".whl")]


def report(parts: list[tuple[str, int]]) -> None:
    for path, size in parts:
        print(f"  {path}: {size / 2**20:.1f} MiB")
    print(f"  in all: {sum(size for _, size in parts) / 2**20:.1f} MiB")


def build(out: str, python: str, platform: str, have: str | None, extras: list[str], part_mib: float, also=(),
          project: str | None = None):  # fmt: skip
    """The wheelhouse built beside `out` and moved there once whole (`out` checked by `check_out` first)."""
    with (
        built_beside(out, "wheelhouse.py") as house,
        tempfile.TemporaryDirectory(dir=os.path.dirname(house)) as staging,
    ):
        print(f"wheelhouse {out}: ", end="")
        parts = split(collect(staging, python, platform, have, extras, also, project, part_mib), house, part_mib)
    parts = [(os.path.join(out, os.path.basename(p)), size) for p, size in parts]
    report(parts)
    return parts


def check_project_wheel(path: str) -> None:
    """`--project` must be a wheel of constrained-sft: a zip archive named `constrained_sft-*.whl` holding its
    `.dist-info/WHEEL` (a text file named .whl, or another package's wheel, is refused before any work)."""
    import zipfile

    name = os.path.basename(path)
    if not (os.path.isfile(path) and name.endswith(".whl") and canonical(name.split("-")[0]) == canonical(PROJECT)):
        refuse(f"--project {path}: not a wheel file of {PROJECT} (constrained_sft-VERSION-...whl)")
    try:
        with zipfile.ZipFile(path) as wheel:
            if not any(n.endswith(".dist-info/WHEEL") for n in wheel.namelist()):
                refuse(f"--project {path}: a zip archive without .dist-info/WHEEL, not a wheel")
    except zipfile.BadZipFile:
        refuse(f"--project {path}: not a wheel (not a zip archive); build one with `pip wheel --no-deps .`")


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__.split("\n\n")[0], prog="wheelhouse.py")
    parser.add_argument("out", help="the wheelhouse folder: new, empty, or one this script wrote (then replaced)")
    parser.add_argument("--python", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                        help="the target's Python, e.g. 3.12 (default: this one)")  # fmt: skip
    parser.add_argument("--platform", default="manylinux_2_28_x86_64", help="the target's wheel platform tag")
    parser.add_argument("--have", help="the target's `pip freeze`: what it has is left out")
    parser.add_argument("--extras", default="", help="extras of constrained-sft to include, comma-separated")
    parser.add_argument("--also", action="append", default=[], help="another installed package to carry (repeatable)")
    parser.add_argument(
        "--part-mib",
        type=float,
        default=56.0,
        help="the largest part, MiB (default 56: 64 MiB per call less the working tree)",
    )
    parser.add_argument("--project", help="the project's wheel to carry (default: built from this checkout)")
    args = parser.parse_args(argv)
    extras = [e for e in args.extras.split(",") if e]
    check_arguments(args.python, args.platform, args.have, args.part_mib, extras, args.also)
    if args.project:
        check_project_wheel(args.project)
    inputs = {flag: path for flag, path in (("--have", args.have), ("--project", args.project)) if path}
    args.out = check_out(args.out, "OUT", "wheelhouse.py", inputs)
    build(args.out, args.python, args.platform, args.have, extras, args.part_mib, args.also, args.project)
    return 0


if __name__ == "__main__":
    sys.exit(main())
