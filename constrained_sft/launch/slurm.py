"""
Each call a Slurm job through submitit (`--launcher slurm`): `SlurmLauncher` over the cluster `utils.slurm`
checked and the folder's ledger (`utils.slurm_ledger`). Submitting asks the queue first, under the ledger's lock: a
call whose job of the same name is still queued or running (this command's earlier call, or another's) is followed,
not submitted again. Following is submitit's job API (`submitit.helpers.as_completed` over `utils.slurm_watch`'s
squeue-reading jobs); a job that ended without a result is `JobEnded`, its state, error and log in one line. The
jobs outlive the command (`detached`); with `--wait false` it returns once they are submitted (`follows`). Ctrl-C
stops following, not the jobs: `StoppedFollowing` says which keep running and how to cancel them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..utils.slurm import POLL, Cluster, StoppedFollowing, check_cluster, run_slurm
from ..utils.slurm_ledger import Ledger
from ..utils.slurm_options import SlurmArguments
from .base import Call, Capabilities, Handle, JobEnded, Launcher

if TYPE_CHECKING:
    from . import Request


@dataclass
class SlurmHandle:
    """A Slurm job of the ledger's folder (its files under `logs/<job id>/`)."""

    name: str
    job_id: str
    logs: str

    def result(self) -> object:
        from ..utils.slurm_watch import QueueJob

        try:  # submitit's result, or the job's own error: `Cluster.ended` says it
            return QueueJob(folder=os.path.join(self.logs, "%j"), job_id=self.job_id).result()
        except Exception:
            raise JobEnded(Cluster.ended(self.logs, self.job_id)) from None


@dataclass
class SlurmLauncher:
    """See the module docstring. `gpus`: what each job asks (`Cluster.gpus`); `what`: what a job is, for the
    line printed as they are submitted ("run", "job")."""

    cluster: Cluster
    ledger: Ledger
    gpus: int
    what: str = "job"

    @property
    def capabilities(self) -> Capabilities:
        return capabilities(self.cluster.options, self.what)

    def sharing(self, jobs: int) -> int:
        return 1  # every job holds its own devices

    def at_most(self, jobs: int) -> Launcher:
        return self

    def describe(self, jobs: int) -> str:
        return f", each a Slurm job on partition {self.cluster.partition!r}"

    def submit(self, calls: Sequence[Call]) -> list[Handle]:
        if not calls:
            return []
        handles: list[Handle] = []
        found = 0
        with self.ledger.locked():
            active = self.ledger.active(self.cluster)  # the queue's word, the ledger repaired from it
            for call in calls:
                if (job_id := active.get(call.name)) is not None:
                    found += 1
                else:
                    job_id = self.cluster.submit(
                        self.ledger.logs,
                        self.ledger.tag,
                        call.name,
                        self.gpus,
                        call.function,
                        *call.args,
                        note=call.note,
                    )
                    self.ledger.add(call.name, job_id, **call.about)
                handles.append(SlurmHandle(call.name, job_id, self.ledger.logs))
        print(
            f"slurm: {len(calls) - found} {self.what}(s) submitted to partition {self.cluster.partition!r}, {found} "
            "already queued or running: "
            + ", ".join(f"{h.name} ({h.job_id})" for h in handles)
            + f"; logs in {self.ledger.logs}"
        )
        return handles

    def wait(self, handles: Sequence[Handle]) -> list[Handle]:
        if not self.cluster.options.wait or not handles:
            return []
        import submitit

        from ..utils.slurm_watch import QueueJob

        by_id = {h.job_id: h for h in handles}
        jobs = [QueueJob(folder=os.path.join(self.ledger.logs, "%j"), job_id=i) for i in by_id]
        try:
            first = next(submitit.helpers.as_completed(jobs, poll_frequency=POLL))
        except KeyboardInterrupt:
            running = ", ".join(f"{h.name} ({h.job_id})" for h in handles)
            raise StoppedFollowing(
                f"stopped following; the Slurm jobs keep running: {running}. Cancel them with "
                f"`scancel {' '.join(by_id)}`, or run the same command again to follow them and collect."
            ) from None
        return [by_id[first.job_id]]

    def cancel(self, handles: Sequence[Handle]) -> None:
        if not handles:
            return
        ids = [h.job_id for h in handles]
        run_slurm("scancel", "--state=PENDING", *ids)  # Slurm's own filter: a job that has started runs on
        print(f"slurm: {', '.join(f'{h.name} ({h.job_id})' for h in handles)} cancelled where still queued")

    def close(self) -> None:
        return None


def capabilities(options: SlurmArguments, what: str) -> Capabilities:
    """A Slurm launcher's capabilities (known before the cluster is asked)."""
    return Capabilities(
        at_once=None,
        time_budget=False,
        processes=False,
        detached=True,
        follows=options.wait,
        said=f"`--launcher slurm` submits every {what} as its own Slurm job (the cluster decides how many run at "
        "once)",
    )


def open_slurm(options: SlurmArguments, folder: str, request: Request) -> SlurmLauncher:
    """The cluster asked before any submission (`utils.slurm.check_cluster`), then what every job will ask put to
    `sbatch --test-only` (more GPUs per job than a node has, a request sbatch would refuse: refused here)."""
    cluster = check_cluster(options, folder, request.flag)
    gpus = cluster.gpus(request.gpus, "--gpus_per_run" if request.what == "run" else "--slurm_gpus")
    cluster.check_request(gpus, "--launcher slurm")
    return SlurmLauncher(cluster, Ledger(os.path.join(folder, "slurm"), request.flag), gpus, request.what)
