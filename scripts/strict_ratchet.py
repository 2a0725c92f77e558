"""
The ratchet on `mypy --strict` for the floors not yet strict (`make lint`, so CI): `utils`, `constraints`, `readout`,
`comparison` and `noise` are strict in pyproject.toml and must stay clean; the rest of the package has `CEILING`
errors under `--strict`, a count that may only fall. More fails, naming the files that gained; fewer fails too, asking
for `CEILING` to be lowered to the new count in the same commit, so that the ground gained is kept.

    python scripts/strict_ratchet.py          # from the repository root, with the dev dependencies installed
"""

from __future__ import annotations

import collections
import os
import re
import sys

from mypy import api

# `mypy --strict` errors of the package at the commit that last lowered it (573 when issue 81 was filed; 494 once the
# five floors were strict; 492 with each evaluation's folder typed; 473 with the data formats typed for images)
CEILING = 473
ERROR = re.compile(r"^(?P<file>[^:]+):\d+: error: ")


def main() -> int:
    out, err, _ = api.run(["--strict", "--no-error-summary"])
    errors = collections.Counter(m["file"] for line in out.splitlines() if (m := ERROR.match(line)))
    if err.strip():
        print(err, file=sys.stderr)
        return 2
    count = sum(errors.values())
    worst = ", ".join(f"{file} {n}" for file, n in errors.most_common(5))
    if count > CEILING:
        print(f"mypy --strict: {count} errors, more than the ratchet's {CEILING}: type what you added ({worst}).")
        return 1
    if count < CEILING:
        print(
            f"mypy --strict: {count} errors, fewer than the ratchet's {CEILING}: set CEILING = {count} in {os.path.relpath(__file__)}."
        )
        return 1
    print(f"mypy --strict: {count} errors, at the ratchet (most in: {worst}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
