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

import dataclasses
import os
import statistics
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context
from typing import TYPE_CHECKING

from ..comparison import RunKey
from . import clock
from .devices import DeviceSlots, Machine, pin
from .phases import Job, run_job
from .probe import ProbeTimes, optimizer_steps
from .record import EXITS, PHASES, RunRecord

if TYPE_CHECKING:
    from multiprocessing.context import SpawnContext
    from multiprocessing.queues import Queue

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
        exits = job.phases == (EXITS,)
        if job.run in blocked:
            continue  # a run after the first that did not fit, or the exits of such a run
        slot = min(range(jobs), key=slots.__getitem__)
        start = max(slots[slot], ends.get(job.run, 0.0))
        end = start + est.total(job, share(jobs))
        if end > budget:
            if not exits:  # seed-major: the runs after it wait too
                blocked.update(j.run for j in queue[i:] if j.phases != (EXITS,))
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


def steps_text(training, epoch_steps: int) -> str:
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
    machine: Machine | None = None,
) -> list[str]:
    """What the study will do, before it starts: jobs left, their steps, where they run (`machine`), the estimate and
    what the budget allows (`budget`: the seconds left of it once `spent` went on preparing the data and the
    probe)."""
    share = machine.sharing if machine is not None else alone
    runs = [job for job in queue if job.phases != (EXITS,)]
    exits = [job for job in queue if job.phases == (EXITS,)]
    steps = sorted({steps_text(job.recipe.training, est.epoch_steps if est else 0) for job in runs})
    lines = [
        f"plan: {len(runs)} of {total} run(s) left ({', '.join(j.name for j in runs) or 'none'}), "
        f"{' / '.join(steps) or 'no optimizer steps'} each, {jobs} at a time"
        + (f", {machine.slots(jobs).describe()}" if machine is not None and jobs > 1 else "")
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


def _worker_init(threads: int, parent: int, groups: Queue[tuple[str, ...]]) -> None:
    """A worker's start: its devices (one group off `groups`, a queue: one per worker, before CUDA starts), its
    threads, and its end with the study's."""
    pin(groups.get())
    import torch

    torch.set_num_threads(threads)
    follow_parent(parent)


def follow_parent(parent: int, every: float = 1.0) -> None:
    """End this worker within `every` seconds of the study that started it (`parent`, its process id) ending, however
    it ends: a study killed with SIGKILL runs no clean-up, and a worker left training would go on writing into its
    folder while the next call starts the same run. A daemon thread polls the parent (written by hand: the pool
    stops its workers only when the study exits normally)."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(1)  # the records written so far are whole (atomic writes); the phase in flight is done again

    threading.Thread(target=watch, name="follow-study", daemon=True).start()


def run_all(
    queue: list[Job],
    jobs: int,
    budget: float | None,
    est: Estimate | None,
    on_done: Callable[[Job, RunRecord], Estimate | None],
    slots: DeviceSlots | None = None,
) -> list[Job]:
    """Run `queue` with at most `jobs` at once; with `budget` (seconds from now) start a job only if its estimate
    ends inside it (runs stop at the first that does not fit; exits jobs are each tried, once their run is done).
    Each job carries its phases' estimates and the runs sharing its device; `on_done(job, record)` is called here as
    each ends and may return a better estimate. `slots`: the workers' devices (`devices.DeviceSlots`; None: all on
    one). Returns the jobs not started."""
    deadline = None if budget is None else clock.now() + budget
    slots = slots or DeviceSlots((), jobs)
    sharing = slots.sharing
    queue, left = list(queue), []
    blocked: set[RunKey] = set()

    def fits(job: Job) -> bool:
        return deadline is None or est is None or clock.now() + est.total(job, sharing) <= deadline

    def ready(running_runs: set) -> Job | None:
        """The next job to start (taken off the queue), or None: nothing can start now."""
        i = 0
        while i < len(queue):
            job = queue[i]
            exits = job.phases == (EXITS,)
            if exits and job.run in blocked:
                left.append(queue.pop(i))
                continue
            if exits and (job.run in running_runs or any(j.run == job.run for j in queue[:i])):
                i += 1  # its run is still training or measuring
                continue
            queue.pop(i)
            if fits(job):
                return dataclasses.replace(job, estimates=est.of(job, sharing) if est else {}, jobs=sharing)
            left.append(job)
            if not exits:  # seed-major: the runs after it wait too, and so do their exits
                stopped = [j for j in queue if j.phases != (EXITS,)]
                blocked.update(j.run for j in [job, *stopped])
                left.extend(stopped)
                queue[:] = [j for j in queue if j.phases == (EXITS,)]
                i = 0
        return None

    if jobs == 1:
        while (job := ready(set())) is not None:
            est = on_done(job, run_job(job)) or est
        return left + queue
    threads = max(1, (os.cpu_count() or 1) // jobs)
    context = get_context("spawn")  # a fresh interpreter per worker: no CUDA state, no process group inherited
    pool = worker_pool(slots, threads, context)
    with pool:
        running: dict = {}
        while queue or running:
            while len(running) < jobs and (job := ready({j.run for j in running.values()})) is not None:
                running[pool.submit(run_job, job)] = job
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                job = running.pop(future)
                est = on_done(job, future.result()) or est  # a failed job raises here, naming itself
    return left + queue


def worker_pool(slots: DeviceSlots, threads: int, context: SpawnContext | None = None) -> ProcessPoolExecutor:
    """`slots.workers` spawned workers, worker i holding `slots.of(i)` for its life (a job runs on its worker's
    devices, so no job lands on devices another worker holds)."""
    context = context or get_context("spawn")
    groups = context.Queue()
    for worker in range(slots.workers):
        groups.put(slots.of(worker))
    return ProcessPoolExecutor(
        slots.workers, mp_context=context, initializer=_worker_init, initargs=(threads, os.getpid(), groups)
    )
