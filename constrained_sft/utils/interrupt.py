"""
A cluster's warning that a job must stop, caught where the work can stop cleanly. Slurm signals a job before its time
limit (USR2, which submitit asks for with `--signal`) and at preemption or `scancel` (TERM, then KILL after the
cluster's grace time). Training cannot be checkpointed from inside a signal handler (the handler runs between two
bytecodes, maybe halfway through an optimizer step), so `Deferred` only notes the signal; the training loop asks at
each step's end (`trainers.signals.SaveOnSignal`), saves a checkpoint and raises `Interrupted`, and the job decides:
requeue itself (USR2: `utils.slurm_job.Requeueable`) or end (TERM: Slurm requeues a preempted job itself, and a
cancelled one stays cancelled).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from .files import read_json

WARNINGS = (signal.SIGUSR2, signal.SIGTERM)
TIME_LIMIT = "time limit"  # why a job noted its requeue (`utils.slurm_job.Requeueable.checkpoint`)
_requeueable = False  # whether this process runs a job that requeues itself (`requeueable_job`)


@contextlib.contextmanager
def requeueable_job() -> Iterator[None]:
    """Marks the call inside as a job that a warning requeues (`utils.slurm_job.Requeueable`): work that can stop
    cleanly stops on the warning there (`in_requeueable_job`), and nowhere else."""
    global _requeueable
    _requeueable = True
    try:
        yield
    finally:
        _requeueable = False


def in_requeueable_job() -> bool:
    return _requeueable


def requeued_for(note: str, otherwise: str) -> str:
    """Why the job was requeued since it last started: what `Requeueable.checkpoint` noted at `note` (`TIME_LIMIT`),
    else `otherwise` (requeued by Slurm: preempted, `scontrol requeue`)."""
    if not os.path.isfile(note):
        return otherwise
    noted = read_json(note, "the requeue note")
    return str(noted.get("why", otherwise)) if isinstance(noted, dict) else otherwise


class Interrupted(BaseException):
    """Work stopped at a clean point after a cluster's signal (`signum`), its checkpoint on disk. A BaseException,
    as KeyboardInterrupt: no `except Exception` on the way up may swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped after {signal.Signals(signum).name}: checkpoint saved")
        self.signum = signum


class Deferred:
    """Between `arm()` and `disarm()`, the signals of `WARNINGS` are noted (`caught`) instead of acted on; the
    handlers found are put back by `disarm` (submitit's, in a Slurm job). Only in the main thread, where Python
    delivers signals; elsewhere it notes nothing."""

    def __init__(self, signals: tuple[int, ...] = WARNINGS) -> None:
        self.signals = signals
        self.caught: int | None = None
        self._before: dict[int, Any] = {}

    def arm(self) -> None:
        if threading.current_thread() is not threading.main_thread() or self._before:
            return
        for signum in self.signals:
            self._before[signum] = signal.signal(signum, self._note)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.caught = self.caught or signum

    def disarm(self) -> None:
        for signum, handler in self._before.items():
            signal.signal(signum, handler)
        self._before = {}
