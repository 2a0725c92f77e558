"""
submitit's job API on every Slurm cluster. submitit reads job states with `sacct`, which answers only where the
cluster keeps an accounting database (slurmdbd), and many do not (submitit's issue 1720; torchx reads `squeue` there
too). `QueueWatcher` is submitit's own extension point for this, a `SlurmInfoWatcher` whose command and reading are
replaced: it reads `squeue`, which every cluster answers, so that `Job.state`, `done()`, `result()`, `exception()`
and `submitit.helpers.as_completed` work for the jobs of `QueueExecutor` (`QueueJob`). A job the queue no longer
lists (purged after the cluster's `MinJobAge`) has ended: its state reads "ENDED", and its result file, where
there is one, says how. Imported only where submitit is.
"""

from __future__ import annotations

import getpass

import submitit
from submitit.slurm.slurm import SlurmInfoWatcher

from .slurm_options import ACTIVE

# the states submitit counts as not done (`InfoWatcher.is_done`): an active state outside them is read as RUNNING
NOT_DONE = ("READY", "PENDING", "RUNNING", "UNKNOWN", "REQUEUED", "COMPLETING", "PREEMPTED")
ENDED = "ENDED"  # no longer in the queue


class QueueWatcher(SlurmInfoWatcher):
    """One reading of the user's jobs (`squeue -u`) for every registered job, at submitit's pace (after 0, 2, 4, 8 s
    ... then every `delay_s`). `State` is what submitit decides by; `SlurmState` is Slurm's own word."""

    def _make_command(self) -> list[str] | None:
        if not self._registered - self._finished:
            return None
        # the user's jobs, not `-j ids`: squeue refuses an id it no longer knows (purged after MinJobAge)
        return ["squeue", "-h", "--states=all", "-o", "%i|%T", "-u", getpass.getuser()]

    def read_info(self, string: bytes | str) -> dict[str, dict[str, str]]:
        text = string.decode() if isinstance(string, bytes) else string
        listed = dict(line.strip().split("|", 1) for line in text.splitlines() if "|" in line)
        info = {}
        for job_id in self._registered - self._finished:
            slurm = listed.get(job_id, ENDED).strip()
            if slurm in ACTIVE:
                state = slurm if slurm in NOT_DONE else "RUNNING"  # e.g. CONFIGURING, SUSPENDED: not done
            else:
                state = ENDED if slurm == "PREEMPTED" else slurm  # PREEMPTED in the queue has ended: not requeued
            info[job_id] = {"JobID": job_id, "State": state, "SlurmState": slurm}
        return info


class QueueJob(submitit.SlurmJob[object]):
    """A submitit Slurm job whose state is read from the queue (`QueueWatcher`)."""

    watcher = QueueWatcher(delay_s=30)


class QueueExecutor(submitit.SlurmExecutor):
    """submitit's Slurm executor, its jobs `QueueJob`s."""

    job_class = QueueJob
