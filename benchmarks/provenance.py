"""
Which code and machine a benchmark measured, and where its result goes: the commit of the checkout that holds the
package, so a result names its code where a worktree's path says nothing once it is gone; the machine in words; the
JSON result written.

Shared by the benchmarks (imported as a sibling module: each runs as `python benchmarks/<name>.py`).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess


def source_commit(folder: str) -> str | None:
    """The git commit of the checkout whose tracked files include the package in `folder` (`+dirty` with uncommitted
    changes to tracked files), or None: results name the code they measured, where a worktree's path says nothing
    once it is gone. A source copy (a tarball, an rsync) that lies inside another repository without being tracked
    there has no commit of its own: it gets None, and the row names the package version alone."""
    package = os.path.join(folder, "__init__.py")
    try:
        tracked, head, status = (
            subprocess.run(["git", "-C", folder, *command], capture_output=True, text=True, timeout=30)
            for command in (
                ["ls-files", "--error-unmatch", package],
                ["rev-parse", "--short=7", "HEAD"],
                ["status", "--porcelain", "--untracked-files=no"],
            )
        )
        if tracked.returncode != 0 or head.returncode != 0:
            return None
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")


def machine() -> str:
    """The machine a result was measured on, in words: its cores and architecture."""
    return f"{os.cpu_count()} cores, {platform.machine()}"


def write_report(path: str | None, report: dict) -> None:
    """The benchmark's JSON result at `path` (its folder created); nothing where no `--out` was given."""
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            json.dump(report, f, indent=1)
