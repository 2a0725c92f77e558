"""
The ratchet on `mypy --strict` (`make lint`, so CI). The strict floors (pyproject.toml's per-module flags, read here as
`STRICT`) must pass a real `mypy --strict`: no error in any of their files. Every other file of the package has at most
the `--strict` errors `strict_baseline.json` (beside this script) records for it, a count per file that may only
fall: a file above its count fails, naming each file that gained and by how many; a file below it fails too, asking
for the baseline to be rewritten (`--update`) in the same commit, so that the ground gained is kept.

    python scripts/strict_ratchet.py            # from the repository root, with the dev dependencies installed
    python scripts/strict_ratchet.py --update   # after typing: write the new, lower counts
"""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

import tomllib
from mypy import api

BASELINE = Path(__file__).with_name("strict_baseline.json")
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def strict_floors() -> tuple[str, ...]:
    """The floors pyproject.toml makes strict (the override that disallows untyped definitions): 'utils', ..."""
    overrides = tomllib.loads(PYPROJECT.read_text())["tool"]["mypy"]["overrides"]
    strict = next(o for o in overrides if o.get("disallow_untyped_defs"))
    return tuple(module.split(".")[1] for module in strict["module"])


STRICT = strict_floors()  # a real `mypy --strict` finds nothing in them
ERROR = re.compile(r"^(?P<file>[^:]+):\d+: error: ")


def strict_errors() -> tuple[collections.Counter[str], list[str]]:
    """({file: `mypy --strict` errors}, the error lines in the strict floors)."""
    out, err, _ = api.run(["--strict", "--no-error-summary"])
    if err.strip():
        raise SystemExit(f"mypy --strict could not run:\n{err}")
    lines = [line for line in out.splitlines() if ERROR.match(line)]
    counts = collections.Counter(m["file"] for line in lines if (m := ERROR.match(line)))
    floors = tuple(f"constrained_sft/{floor}/" for floor in STRICT)
    return counts, [line for line in lines if line.startswith(floors)]


def compare(counts: dict[str, int], baseline: dict[str, int]) -> tuple[list[str], list[str]]:
    """(files above their baseline count, as 'file: n (baseline m)'; files below it)."""
    gained = [f"{f}: {n} (baseline {baseline.get(f, 0)})" for f, n in sorted(counts.items()) if n > baseline.get(f, 0)]
    fell = [f for f, m in sorted(baseline.items()) if counts.get(f, 0) < m]
    return gained, fell


def main(argv: list[str]) -> int:
    counts, in_floors = strict_errors()
    if in_floors:
        print("mypy --strict: the strict floors must have no error:\n" + "\n".join(in_floors))
        return 1
    if "--update" in argv:
        BASELINE.write_text(json.dumps(dict(sorted(counts.items())), indent=1) + "\n")
        print(f"mypy --strict: {sum(counts.values())} errors in {len(counts)} files written to {BASELINE.name}.")
        return 0
    baseline: dict[str, int] = json.loads(BASELINE.read_text())
    gained, fell = compare(counts, baseline)
    total, before = sum(counts.values()), sum(baseline.values())
    if gained:
        print(f"mypy --strict: {total} errors (baseline {before}); type what these files gained: " + "; ".join(gained))
        return 1
    if fell:
        print(
            f"mypy --strict: {total} errors, fewer than the baseline's {before} in {', '.join(fell)}: run "
            "`python scripts/strict_ratchet.py --update` and commit the baseline."
        )
        return 1
    print(f"mypy --strict: {total} errors, each file at its baseline; the strict floors clean ({', '.join(STRICT)}).")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
