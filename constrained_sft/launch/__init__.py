"""
Where a command's jobs run: one launcher object (`base.Launcher`) that the study and the sweep hand their calls to,
never asking which it is. `check` says, before any work, what the chosen launcher can do (`base.Capabilities`, and
on this machine its devices); `open_launcher` makes it (on Slurm, after asking the cluster). The launchers:
`local.InProcess`, `local.DevicePool`, `slurm.SlurmLauncher`; which one `--launcher` and `--jobs` name is decided
here, once (`KINDS`).

May import: `utils` (the Slurm plumbing: `utils.slurm`, `utils.slurm_ledger`, `utils.slurm_job`); `study`, `sweep` and
`cli` import it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from ..utils.slurm import SlurmJobsError
from ..utils.slurm_options import SlurmArguments
from .base import Call, Capabilities, Handle, JobEnded, Launcher
from .devices import Machine, visible_devices
from .local import HERE, DevicePool, InProcess, pool_capabilities

__all__ = [
    "KINDS",
    "Call",
    "Capabilities",
    "Handle",
    "JobEnded",
    "JobsError",
    "Launcher",
    "Request",
    "check",
    "open_launcher",
]

JobsError = SlurmJobsError  # jobs that ended without finishing their work, one line each


@dataclass(frozen=True)
class Request:
    """What a command asks of its launcher: its folder (`flag` names it in refusals; a Slurm ledger and logs go in
    its `slurm/`), calls at once (`--jobs`), GPUs per call (`--gpus_per_run`) and what a call is ("run", "job")."""

    folder: str
    flag: str
    jobs: int = 1
    gpus: int = 1
    what: str = "job"


class Kind(Protocol):
    def check(self, options: SlurmArguments, request: Request) -> Capabilities: ...

    def open(self, options: SlurmArguments, request: Request) -> Launcher: ...


class Local:
    """This machine: `InProcess` for one call at a time, else a `DevicePool` of `--jobs` workers."""

    @staticmethod
    def machine(request: Request) -> Machine:
        machine = Machine(tuple(visible_devices()), request.gpus)  # CUDA_VISIBLE_DEVICES naming a GPU twice: refused
        machine.slots(request.jobs)  # a call wanting more GPUs than the machine has: refused
        return machine

    def check(self, options: SlurmArguments, request: Request) -> Capabilities:
        self.machine(request)
        return HERE if request.jobs == 1 else pool_capabilities(request.jobs)

    def open(self, options: SlurmArguments, request: Request) -> Launcher:
        machine = self.machine(request)
        return InProcess() if request.jobs == 1 else DevicePool(machine, request.jobs)


class Slurm:
    """A Slurm cluster: each call a job (`slurm.SlurmLauncher`), the cluster asked when it is opened."""

    def check(self, options: SlurmArguments, request: Request) -> Capabilities:
        from .slurm import capabilities

        return capabilities(options, request.what)

    def open(self, options: SlurmArguments, request: Request) -> Launcher:
        from .slurm import open_slurm

        return open_slurm(options, os.path.abspath(request.folder), request)


KINDS: dict[str, Kind] = {"local": Local(), "slurm": Slurm()}  # `--launcher`'s choices (`utils.slurm_options`)


def check(options: SlurmArguments, request: Request) -> Capabilities:
    """What the launcher `options` name can do, checked before any work and without asking a cluster: on this
    machine its devices (`CUDA_VISIBLE_DEVICES`, `--gpus_per_run`)."""
    return KINDS[options.launcher].check(options, request)


def open_launcher(options: SlurmArguments, request: Request) -> Launcher:
    """The launcher `options` name, ready to take calls (Slurm: the cluster, partition, account, folder and request
    checked first: `utils.slurm.check_cluster`, `Cluster.check_request`)."""
    return KINDS[options.launcher].open(options, request)
