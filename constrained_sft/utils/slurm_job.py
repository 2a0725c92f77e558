"""
What every Slurm job runs (`Requeueable`, submitted by `utils.slurm.Cluster.submit`): the call, with torch on the
cores Slurm gave the job, as a submitit `Checkpointable`, so a job warned of its time limit (USR2, `--signal`)
requeues itself through submitit, up to `--slurm_requeues` times, and goes on from where it stopped; a job
preempted (TERM) ends and Slurm requeues it where the partition says so; a job cancelled stays cancelled. Imported
only where submitit is: on the submitting machine and in the jobs.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import submitit

from .interrupt import Interrupted


def in_job(call: Callable[..., object], *args: object) -> object:
    """`call(*args)` with torch on the cores Slurm gave the job (it would take the node's every core,
    oversubscribing a node shared with other jobs)."""
    if cores := os.environ.get("SLURM_CPUS_PER_TASK"):
        import torch

        torch.set_num_threads(int(cores))
    return call(*args)


class Requeueable(submitit.helpers.Checkpointable):
    """`call(*args)` in a Slurm job that survives its time limit. Where the call stops cleanly on the warning
    (`utils.interrupt.Interrupted`: a study's training saves a checkpoint first), USR2 is handed back to submitit's
    handler, which calls `checkpoint` and requeues the job (or, past `--slurm_requeues` time limits, ends it with
    submitit's error); where it is warned outside such a stop, submitit's handler acts at once. `on_requeue(*args)`
    notes why, before the job is requeued (the next start reads it)."""

    def __init__(self, call: Callable[..., object], on_requeue: Callable[..., None] | None = None) -> None:
        self.call = call
        self.on_requeue = on_requeue

    def __call__(self, *args: object) -> object:
        try:
            return in_job(self.call, *args)
        except Interrupted as stop:
            if stop.signum == signal.SIGUSR2:
                signal.raise_signal(signal.SIGUSR2)  # submitit's handler: `checkpoint`, requeue, exit
            raise SystemExit(128 + stop.signum) from None  # preempted or cancelled: Slurm decides what follows

    def checkpoint(self, *args: object) -> submitit.helpers.DelayedSubmission:
        if self.on_requeue is not None:
            self.on_requeue(*args)
        return submitit.helpers.DelayedSubmission(self, *args)
