"""
A wheelhouse: every wheel `constrained-sft` needs at run time but torch (and CUDA), for a target Python and platform,
pinned to the lock, so a machine without network installs the package with `pip install --no-index` and keeps its
own torch (a lent GPU machine: its CUDA torch stays).

    python scripts/wheelhouse.py OUT [--python 3.12] [--platform manylinux_2_28_x86_64] [--have FREEZE.txt]
                                 [--extras offline] [--also gguf] [--part-mib 56]
    bash scripts/install_wheelhouse.sh OUT            # on the target: pip install --no-index from every part

`make wheelhouse` runs the first with the variables of the same names. The dependency closure is read from this
environment's installed metadata (the lock's releases: `make setup` installed them), its markers evaluated for the
target Python; `--have` (the target's `pip freeze`) leaves out what the target already has, so what is carried is
what is missing. The wheels go into `part-1/`, `part-2/`, ... of at most `--part-mib` MiB each (a part per transfer
where a transfer is capped); the size of each part and of the whole is printed.

Written by hand because pip has no command for it: `pip download` of the package would resolve torch (and its
CUDA wheels) with the rest, and has no per-target marker evaluation without a resolver run on that target.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import tempfile

from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK = os.path.join(ROOT, "requirements", "lock-cpu.txt")
LEFT_OUT = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")  # the target's own torch and its CUDA stack stay
PROJECT = "constrained-sft"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


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


def target_environment(python: str) -> dict[str, str]:
    env = default_environment()
    env.update(python_version=".".join(python.split(".")[:2]), python_full_version=f"{python}.0"
               if python.count(".") == 1 else python, sys_platform="linux", platform_system="Linux",
               platform_machine="x86_64", implementation_name="cpython", platform_python_implementation="CPython")  # fmt: skip
    return env


def closure(extras: list[str], python: str, also: tuple[str, ...] = ()) -> dict[str, str]:
    """{package: version} of everything `constrained-sft[extras]` (and the packages `also` names) needs on the target,
    from the installed metadata."""
    env = target_environment(python)
    found: dict[str, str] = {}
    todo = [(PROJECT, tuple(extras)), *((name, ()) for name in also)]
    while todo:
        name, wanted = todo.pop()
        key = canonical(name)
        if key in found and not wanted:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise SystemExit(
                f"wheelhouse: {name} is needed on the target but not installed here; run `make setup`."
            ) from None
        found[key] = dist.version.split("+")[0]
        if LEFT_OUT.match(key):  # the target's torch comes with its own dependencies
            continue
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not any(
                req.marker.evaluate({**env, "extra": extra}) for extra in (*wanted, "")
            ):
                continue
            if canonical(req.name) not in found or req.extras:
                todo.append((req.name, tuple(req.extras)))
    return found


def download(packages: dict[str, str], out: str, python: str, platform: str) -> None:
    """Binary wheels of `packages` for the target, pinned, without their dependencies (the closure has them);
    a package with no wheel for the target is built here (pure Python) with `pip wheel`."""
    tag = python.replace(".", "")[:3]
    base = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest", out,
            "--python-version", python, "--implementation", "cp", "--abi", f"cp{tag}", "--abi", "abi3", "--abi", "none"]  # fmt: skip
    for tag_platform in (platform, "manylinux2014_x86_64", "manylinux_2_17_x86_64", "linux_x86_64", "any"):
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


def collect(staging: str, python: str, platform: str, have: str | None, extras: list[str], also=(), project=None):
    """Every wheel the target needs but has (`have`), and the project's own, downloaded into `staging`; prints what
    is left out. Returns the wheel paths."""
    needed = closure(extras, python, tuple(also))
    lock = read_pins(LOCK)
    present = read_pins(have) if have else {}
    pinned = {name: lock.get(name, version) for name, version in needed.items() if name != canonical(PROJECT)}
    carried = {n: v for n, v in pinned.items() if not LEFT_OUT.match(n) and n not in present}
    download(carried, staging, python, platform)
    project_wheel(staging, project)
    left = sorted(n for n in pinned if LEFT_OUT.match(n) or n in present)
    print(f"{len(carried) + 1} wheels for Python {python} / {platform}{' [' + ','.join(extras) + ']' if extras else ''}"
          f"; left out (the target's own): {', '.join(left)}")  # fmt: skip
    return [os.path.join(staging, f) for f in os.listdir(staging) if f.endswith(".whl")]


def report(parts: list[tuple[str, int]]) -> None:
    for path, size in parts:
        print(f"  {path}: {size / 2**20:.1f} MiB")
    print(f"  in all: {sum(size for _, size in parts) / 2**20:.1f} MiB")


def build(out: str, python: str, platform: str, have: str | None, extras: list[str], part_mib: float, also=(),
          project: str | None = None):  # fmt: skip
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out))) as staging:
        print(f"wheelhouse {out}: ", end="")
        parts = split(collect(staging, python, platform, have, extras, also, project), out, part_mib)
    report(parts)
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="wheelhouse.py")
    parser.add_argument("out", help="the wheelhouse folder (replaced)")
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
    if not re.fullmatch(r"3\.\d+", args.python):
        parser.error(f"--python must be a version like 3.12, got {args.python!r}")
    if args.have and not os.path.isfile(args.have):
        parser.error(f"--have {args.have}: no such file (write it on the target with `pip freeze > FILE`)")
    if args.project and not (os.path.isfile(args.project) and args.project.endswith(".whl")):
        parser.error(f"--project {args.project}: not a wheel file (.whl)")
    if args.part_mib <= 0:
        parser.error(f"--part-mib must be > 0, got {args.part_mib}")
    extras = [e for e in args.extras.split(",") if e]
    build(args.out, args.python, args.platform, args.have, extras, args.part_mib, args.also, args.project)
    return 0


if __name__ == "__main__":
    sys.exit(main())
