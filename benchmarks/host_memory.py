"""
A process's host memory as the benchmarks measure it, from Linux's /proc/self/status: the resident set now (VmRSS)
and its high-water mark (VmHWM), which writing 5 to /proc/self/clear_refs resets to the resident set now (Linux
>= 4.0), so a peak can be the part of a run after a given point. Not `ru_maxrss`: Linux carries it from the parent
across exec and never resets it, so a child started by a large parent would report the parent's peak; it is the
fallback only where /proc is missing (macOS).

Shared by the benchmarks (imported as a sibling module: each runs as `python benchmarks/<name>.py`).
"""

from __future__ import annotations

import contextlib
import resource
import sys


def status_mib(field: str) -> float:
    """A memory line of /proc/self/status (`VmRSS`: resident now; `VmHWM`: its high-water mark), in MiB."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def peak_rss_mib() -> float:
    """This process's peak resident set since it started or the last `reset_peak_rss`, in MiB."""
    try:
        return status_mib("VmHWM")
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform != "darwin" else 2**20)


def reset_peak_rss() -> None:
    """The high-water mark set to the resident set now (what is alive stays counted); nothing where /proc lacks it."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")
