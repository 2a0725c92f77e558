"""
How a study spends its time: its jobs one after the other in this process, or several at once in worker processes,
each on its own GPU(s) where the machine has enough (`devices`), else sharing them; with `--time_budget`, a plan
printed before any job starts and no job started that cannot finish inside the budget. A job is a run's phases (`phases.Job`); runs go seed-major (every arm's seed 0, then seed 1, ...) so
a study cut short holds comparable seeds, and the seed-0 exit-layer decodings go last, each its own job, started only
once its run has trained and only where it still fits: the budget may leave them for the next call without losing
the run.

Estimates are per phase (`Estimate`): from the phases this study has finished (the mean of this arm's, else of every
arm's), else from the probe (`probe`: warm steps, each phase measured on its own). A phase measured with `c0` runs
sharing the device is priced at `c` runs as `seconds x max(1, c / c0)`: sharing one device, each of `c` runs gets at
least 1/c of it, and at fewer runs no phase is slower. `c` counts the runs on one device (`share`): N runs on N
GPUs of their own are priced as one run each. The plan takes the number of runs at once, up to `--jobs`,
that starts the most runs inside the budget (so one run that fits alone is never left out because two would not fit
side by side), and corrects itself as phases finish.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..comparison import RunKey
from ..launch.local import follow_parent, worker_pool
from .phases import Job
from .probe import ProbeTimes, optimizer_steps
from .record import EXITS, PHASES, RunRecord

if TYPE_CHECKING:
    from ..config import ConstrainedSFTConfig
    from ..launch import Launcher

__all__ = ["Estimate", "choose_jobs", "estimate", "fitting", "follow_parent", "plan_lines", "worker_pool"]  # the
# pool and its parent-following moved to `launch.local`; importable from here for a release

MIN_SECONDS = 0.05  # a phase recorded faster than this did no work (a run finished before it was recorded)


@dataclass
class Estimate:
    """Per-phase seconds: observations (arm, phase, seconds, runs sharing the device) of finished phases, and the
    probe's figures for what has no observation yet."""

    observed: list[tuple[str, str, float, int]]
    probed: dict[str, float]
    source: str
    epoch_steps: int = 0  # optimizer steps of one pass over the training rows, where the probe counted them

    def phase(self, arm: str, phase: str, jobs: int) -> float:
        def at(seconds: float, measured_with: int) -> float:
            return seconds * max(1.0, jobs / measured_with)

        own = [at(s, c) for a, p, s, c in self.observed if a == arm and p == phase]
        every = [at(s, c) for a, p, s, c in self.observed if p == phase]
        if own or every:
            return statistics.mean(own or every)
        return self.probed.get(phase, 0.0) * jobs

    def of(self, job: Job, jobs: int) -> dict[str, float]:
        """Seconds per phase of `job` with `jobs` runs sharing the device."""
        return {phase: self.phase(job.run.arm, phase, jobs) for phase in job.phases}

    def total(self, job: Job, jobs: int) -> float:
        return sum(self.of(job, jobs).values())


def estimate(records: dict[str, RunRecord], probed: ProbeTimes | None, first: Job | None) -> Estimate | None:
    """The estimate from `records` ({run name: record}) and the probe (measured on `first`); None with neither."""
    observed = [
        (name.split("/")[0], phase, seconds, record.jobs.get(phase, 1))
        for name, record in records.items()
        for phase, seconds in record.seconds.items()
        if phase in PHASES and seconds >= MIN_SECONDS
    ]
    if not observed and probed is None:
        return None
    figures = probed.phases(first) if probed is not None and first is not None else {}
    finished = len({name for name, r in records.items() if r.seconds})
    sources = ([f"the phases of {finished} run(s) this study has recorded"] if observed else []) + (
        [f"a {len(probed.steps)}-step probe ({probed.describe()})"] if probed is not None else []
    )
    return Estimate(observed, figures, "; ".join(sources), probed.epoch_steps if probed is not None else 0)


def alone(jobs: int) -> int:
    """Runs sharing one device when `jobs` run at once on one device (the default `share`)."""
    return jobs


def stopped_by(job: Job, after: Sequence[Job]) -> set[RunKey]:
    """The runs a job that does not fit stops: none for an exit decoding (tried on its own); for a run, itself and
    every run queued after it (seed-major), with their exit decodings."""
    if job.phases == (EXITS,):
        return set()
    return {job.run, *(j.run for j in after if j.phases != (EXITS,))}


def fitting(
    queue: list[Job], est: Estimate, jobs: int, budget: float, share: Callable[[int], int] = alone
) -> list[Job]:
    """The jobs that start and finish inside `budget` seconds with `jobs` slots, each starting when a slot frees and
    (an exits job) once its run's other phases are done: runs in order, the first that cannot fit stopping the runs
    after it (seed-major); each exits job then on its own."""
    slots, out = [0.0] * jobs, []
    ends: dict[RunKey, float] = {}  # when each run's main job ends (its exits job starts after)
    blocked: set[RunKey] = set()
    for i, job in enumerate(queue):
        if job.run in blocked:
            continue  # a run after the first that did not fit, or the exits of such a run
        slot = min(range(jobs), key=slots.__getitem__)
        start = max(slots[slot], ends.get(job.run, 0.0))
        end = start + est.total(job, share(jobs))
        if end > budget:
            blocked.update(stopped_by(job, queue[i + 1 :]))  # seed-major: the runs after it wait too
            continue
        slots[slot], ends[job.run] = end, end
        out.append(job)
    return out


def choose_jobs(
    queue: list[Job], est: Estimate | None, most: int, budget: float | None, share: Callable[[int], int] = alone
) -> int:
    """How many runs at once (1..`most`): the most that start the most jobs inside the budget."""
    if budget is None or est is None or not queue:
        return most
    return max(range(1, most + 1), key=lambda n: (len(fitting(queue, est, n, budget, share)), n))


def steps_text(training: ConstrainedSFTConfig, epoch_steps: int) -> str:
    """A run's optimizer steps as the plan prints them: `max_steps`, or the passes over the data they come from."""
    if training.max_steps > 0:
        return f"{training.max_steps} optimizer steps"
    n = training.num_train_epochs
    passes = f"{n:g} pass{'' if n == 1 else 'es'} over the training rows"
    rows = training.per_device_train_batch_size * training.gradient_accumulation_steps
    per_step = f"{rows}{' packed' if training.packing else ''} rows per step"
    steps = optimizer_steps(training, epoch_steps)
    if steps is None:
        return f"{passes} ({per_step}; the steps are counted as the first run starts)"
    return f"{steps} optimizer steps ({passes}: {epoch_steps} steps of {per_step})"


def plan_lines(
    queue: list[Job],
    done: int,
    total: int,
    est: Estimate | None,
    jobs: int,
    budget: float | None,
    spent: float = 0.0,
    where: Launcher | None = None,
) -> list[str]:
    """What the study will do, before it starts: jobs left, their steps, where they run (`where`: the launcher), the
    estimate and what the budget allows (`budget`: the seconds left of it once `spent` went on preparing the data
    and the probe)."""
    share = where.sharing if where is not None else alone
    runs = [job for job in queue if job.phases != (EXITS,)]
    exits = [job for job in queue if job.phases == (EXITS,)]
    steps = sorted({steps_text(job.recipe.training, est.epoch_steps if est else 0) for job in runs})
    lines = [
        f"plan: {len(runs)} of {total} run(s) left ({', '.join(j.name for j in runs) or 'none'}), "
        f"{' / '.join(steps) or 'no optimizer steps'} each, {jobs} at a time"
        + (where.describe(jobs) if where is not None and jobs > 1 else "")
        + (f"; then the exit-layer decoding of {len(exits)} seed-0 run(s)" if exits else "")
    ]
    if est is None or not queue:
        return lines
    per_phase = {p: est.phase(queue[0].run.arm, p, share(jobs)) for p in PHASES}
    shown = ", ".join(f"{p} {s:.0f} s" for p, s in per_phase.items() if s)
    whole = sum(est.total(job, share(jobs)) for job in queue) / jobs
    lines.append(
        f"estimate per run at {jobs} at a time: {shown} (from {est.source}); all in about {whole / 60:.1f} min"
    )
    if budget is not None:
        fit = fitting(queue, est, jobs, budget, share)
        started = sum(job.phases != (EXITS,) for job in fit)
        decoded = len(fit) - started
        spending = f" ({budget / 60:.1f} min left after {spent:.0f} s of preparation and probe)" if spent >= 1 else ""
        lines.append(
            f"budget: {(budget + spent) / 60:.1f} min{spending}: {started} run(s) fit and start"
            + (f", then {decoded} of {len(exits)} exit decoding(s)" if exits else "")
            + (f"; the other {len(queue) - len(fit)} job(s) wait for the next call" if len(fit) < len(queue) else "")
        )
    return lines
