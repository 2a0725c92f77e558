"""
The study's one schedule, whatever the launcher (`launch`): jobs start in the queue's order, seed-major (every arm's
seed 0, then seed 1, ...), at most as many at once as the launcher runs (every job at once where a cluster decides);
with a time budget a job starts only where its estimate ends inside it, and the first run that does not fit stops
the runs after it (`stopped_by`: a study cut short holds comparable seeds), while each seed-0 exit decoding is tried
on its own once its run is done. `schedule.fitting` plans with the same rule before anything starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, cast

from ..launch import Call, Handle, JobEnded, Launcher
from . import clock
from .record import EXITS, RunRecord
from .schedule import stopped_by

if TYPE_CHECKING:
    from ..comparison import RunKey
    from .phases import Job
    from .schedule import Estimate


class Books(Protocol):
    """The study's side of its jobs (`conduct.Bookkeeper`)."""

    def call(self, job: Job) -> Call: ...

    def done(self, job: Job, record: RunRecord) -> Estimate | None: ...

    def ended(self, job: Job, why: str) -> RunRecord | None: ...


@dataclass
class Outcome:
    """The jobs not started (the budget), those started and not followed (the launcher returns before they end),
    and one line for each that ended without its run's phases."""

    left: list[Job] = field(default_factory=list)
    unfollowed: list[Job] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def run_all(queue: list[Job], launcher: Launcher, budget: float | None, est: Estimate | None, books: Books) -> Outcome:
    """See the module docstring. Each job carries its phases' estimates and the runs sharing its device. As each
    ends, `books.done(job, record)`, which may return a better estimate; one that ended without its result
    (`launch.JobEnded`) goes to `books.ended`, which may find its record whole anyway. A job's own error (where it
    ran here) is raised once the running ones have ended; none starts after it."""
    deadline = None if budget is None else clock.now() + budget
    at_once = launcher.capabilities.at_once
    sharing = launcher.sharing(at_once or 1)
    queue, out = list(queue), Outcome()
    blocked: set[RunKey] = set()

    def fits(job: Job) -> bool:
        return deadline is None or est is None or clock.now() + est.total(job, sharing) <= deadline

    def ready(busy: set[RunKey]) -> Job | None:
        """The next job to start (taken off the queue), or None: nothing can start now."""
        i = 0
        while i < len(queue):
            job = queue[i]
            if job.run in blocked:
                out.left.append(queue.pop(i))
                continue
            if job.phases == (EXITS,) and (job.run in busy or any(j.run == job.run for j in queue[:i])):
                i += 1  # its run is still training or measuring
                continue
            queue.pop(i)
            if fits(job):
                return dataclasses.replace(job, estimates=est.of(job, sharing) if est else {}, jobs=sharing)
            out.left.append(job)
            blocked.update(stopped_by(job, queue))
            i = 0
        return None

    running: list[tuple[Handle, Job]] = []
    try:
        while queue or running:
            batch: list[Job] = []
            busy = {j.run for _, j in running}
            while (at_once is None or len(running) + len(batch) < at_once) and (job := ready(busy)) is not None:
                batch.append(job)
                busy.add(job.run)
            if batch:
                running += zip(launcher.submit([books.call(job) for job in batch]), batch, strict=True)
            if not running:
                break
            ended = launcher.wait([handle for handle, _ in running])
            if not ended:  # the launcher does not follow its jobs (`--wait false`): the next call collects them
                out.unfollowed = [job for _, job in running]
                break
            for handle in ended:
                job = next(j for h, j in running if h is handle)
                running = [(h, j) for h, j in running if h is not handle]
                try:
                    record = cast(RunRecord, handle.result())  # what `books.call`'s function returns
                except JobEnded as why:
                    if (found := books.ended(job, str(why))) is None:
                        out.failed.append(f"{job.run.name}: {why}")
                        continue
                    record = found
                est = books.done(job, record) or est
    finally:
        launcher.close()
    out.left.extend(queue)
    return out
