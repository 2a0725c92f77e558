"""
What every Slurm job runs (`Requeueable`, submitted by `utils.slurm.Cluster.submit`): the call, with torch on the
cores Slurm gave the job, as a submitit `Checkpointable`, so a job warned of its time limit (USR2, `--signal`)
requeues itself through submitit, up to `--slurm_requeues` times, and goes on from where it stopped; a job
preempted (TERM) ends and Slurm requeues it where the partition says so; a job cancelled stays cancelled. Imported
only where submitit is: on the submitting machine and in the jobs.

Slurm sends the warning up to a minute before the time asked ("due to the resolution of event handling", `man
sbatch`; the controller looks every 30 s), so it can come at any moment of a short job: while Python starts, or
after the work is done. Until submitit's handler is in, USR2 kills the process (the job FAILED, not requeued), so
the job loads light: submitit's pickle holds only where the call is, its own `DelayedSubmission` file beside the
logs, loaded (torch, transformers: seconds, a minute on a network filesystem) once submitit has put its handler in.
After the work is done the warning is ignored: Python puts back the default (kill) while it exits, which would turn
a finished job into a failed one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Callable

import submitit

from .files import write_json
from .interrupt import TIME_LIMIT, Interrupted, requeueable_job, requeued_for

__all__ = ["TIME_LIMIT", "Requeueable", "dump_call", "in_job", "requeued_for"]


def in_job(call: Callable[..., object], *args: object) -> object:
    """`call(*args)` with torch on the cores Slurm gave the job (it would take the node's every core,
    oversubscribing a node shared with other jobs)."""
    if cores := os.environ.get("SLURM_CPUS_PER_TASK"):
        import torch

        torch.set_num_threads(int(cores))
    return call(*args)


def dump_call(folder: str, call: Callable[..., object], *args: object) -> str:
    """`call(*args)` written by submitit (its `DelayedSubmission`, the call by reference: a module's function) to a
    new file under `folder`; its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{uuid.uuid4().hex}.pkl")
    submitit.helpers.DelayedSubmission(call, *args).dump(path)
    return path


class Requeueable(submitit.helpers.Checkpointable):
    """`call(*args)` in a Slurm job that survives its time limit. Where the call stops cleanly on the warning
    (`utils.interrupt.Interrupted`: a study's training saves a checkpoint first), USR2 is handed back to submitit's
    handler, which calls `checkpoint` and requeues the job (or, past `--slurm_requeues` time limits, ends it with
    submitit's error); where it is warned outside such a stop, submitit's handler acts at once. `call`: the file
    `dump_call` wrote the call to (see the module docstring). `note`: a file where a time-limit requeue is noted
    (`{"why": TIME_LIMIT}`) before the job is requeued; the next start reads it (`utils.interrupt.requeued_for`)."""

    def __init__(self, call: str, note: str | None = None) -> None:
        self.call = call
        self.note = note

    def __call__(self) -> object:
        loaded = submitit.helpers.DelayedSubmission.load(self.call)  # the heavy imports, under submitit's handler
        try:
            with requeueable_job():
                result = in_job(loaded.function, *loaded.args, **loaded.kwargs)
        except Interrupted as stop:
            if stop.signum == signal.SIGUSR2:
                signal.raise_signal(signal.SIGUSR2)  # submitit's handler: `checkpoint`, requeue, exit
            raise SystemExit(128 + stop.signum) from None  # preempted or cancelled: Slurm decides what follows
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # done: a late warning must not kill the exiting process
        return result

    def checkpoint(self) -> submitit.helpers.DelayedSubmission:
        if self.note is not None:  # warned maybe before the call made its folder; unwritten, the job still requeues
            with contextlib.suppress(OSError):
                os.makedirs(os.path.dirname(os.path.abspath(self.note)), exist_ok=True)
                write_json(self.note, {"why": TIME_LIMIT})
        return submitit.helpers.DelayedSubmission(self)
