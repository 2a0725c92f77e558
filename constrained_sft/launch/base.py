"""
The launcher protocol: where a command's jobs run, as one object the study and the sweep hand their calls to and
never ask which it is. A launcher submits calls (`Call`: a name, a module-level function and its arguments), says
which of them have ended (`wait`), and states what it can do as data (`Capabilities`), checked once against what a
command asks (`Capabilities.check`). Implementations: `local.InProcess` (here, one at a time; every process of an
`accelerate launch` runs every call), `local.DevicePool` (spawned workers, each holding its device group),
`slurm.SlurmLauncher` (each call a Slurm job through submitit; the jobs outlive the command). A caller that no
longer needs the calls not yet started cancels them (`Launcher.cancel`: a sweep whose search holds its trials).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Call:
    """One job: `function(*args)` known as `name` (a run, a worker). `note`: where a job requeued at its time limit
    notes it (`utils.slurm_job.Requeueable`; launchers whose jobs have no time limit ignore it); `about`: what a
    launcher that keeps a ledger records beside the job. `function` must be importable by name (a module's
    function): a launcher may run it in another process or on another machine."""

    name: str
    function: Callable[..., object]
    args: tuple[object, ...] = ()
    note: str | None = None
    about: Mapping[str, object] = field(default_factory=dict)


class JobEnded(Exception):
    """A job that ended without its call's result (failed, cancelled, out of time, preempted and not requeued), in
    one line saying how and where its log is. Raised by `Handle.result` of launchers whose jobs run elsewhere; where
    the call runs here, its own error is raised instead."""


class Handle(Protocol):
    """A submitted call."""

    @property
    def name(self) -> str: ...

    @property
    def job_id(self) -> str: ...

    def result(self) -> object:
        """The call's return value once it has ended; `JobEnded`, or the call's own error where it ran here."""
        ...


@dataclass(frozen=True)
class Capabilities:
    """What a launcher can do. `at_once`: calls running at the same time (None: every submitted call, as the
    cluster schedules them); `time_budget`: it runs a call now, here, so a plan can start only what fits a budget;
    `processes`: it runs every call on each process of an `accelerate launch`; `detached`: its jobs outlive this
    command and a second call finds them; `follows`: this command waits for its jobs to end. `said`: how a refusal
    names the launcher."""

    at_once: int | None
    time_budget: bool
    processes: bool
    detached: bool
    follows: bool
    said: str

    def check(self, jobs: int = 1, time_budget: bool = False, processes: int = 1) -> None:
        """What a command asks, against what the launcher can do: one line naming the launcher and every option it
        cannot honour (`--jobs` beyond `at_once`, `--time_budget`, a launch over several processes)."""
        cannot = {
            "`--jobs`": self.at_once is None or jobs > self.at_once,
            "`--time_budget`": not self.time_budget,
            "`accelerate launch`": not self.processes,
        }
        asked = {"`--jobs`": jobs > 1, "`--time_budget`": time_budget, "`accelerate launch`": processes > 1}
        if any(asked[k] and cannot[k] for k in asked):
            out = [k for k in cannot if cannot[k]]
            listed = ", ".join(out[:-1]) + f" and {out[-1]}" if len(out) > 1 else out[0]
            raise ValueError(f"{self.said}: leave out {listed}.")


class Launcher(Protocol):
    """See the module docstring."""

    @property
    def capabilities(self) -> Capabilities: ...

    def sharing(self, jobs: int) -> int:
        """Calls sharing one device when `jobs` run at once (what a plan prices a call at)."""
        ...

    def at_most(self, jobs: int) -> Launcher:
        """This launcher running at most `jobs` calls at once (a plan chose fewer than it may)."""
        ...

    def describe(self, jobs: int) -> str:
        """Where `jobs` calls at once run, for a plan's line ("", or ", each on its own device(s) (GPU 0, GPU 1)")."""
        ...

    def submit(self, calls: Sequence[Call]) -> list[Handle]:
        """Each call started (or queued), in order; a detached launcher finds a call whose job of the same name is
        still queued or running and hands that job back instead of starting it again."""
        ...

    def wait(self, handles: Sequence[Handle]) -> list[Handle]:
        """Blocks until at least one of `handles` has ended; those that have (none where the launcher does not
        follow its jobs)."""
        ...

    def cancel(self, handles: Sequence[Handle]) -> None:
        """The calls among `handles` that have not started, cancelled (a job still waiting in a cluster's queue:
        `scancel`); those already running end on their own. A cancelled call's `result` is `JobEnded`."""
        ...

    def close(self) -> None:
        """Lets go of what the launcher holds (worker processes); its jobs elsewhere keep running."""
        ...
