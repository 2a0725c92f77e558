"""
A run's job, wherever the launcher runs it (`launch`): `job_main` does the phases its record still lacks
(`phases.run_job`). In a job that can be requeued (a Slurm job: `utils.slurm_job.Requeueable`) it also trains under
`SaveOnSignal` (warned of its time limit or preemption, it saves a checkpoint at the end of the step it is in and
stops; the next start resumes from it, and the requeue is noted in the run's record: why, the phase, Slurm's restart
count). Where every job starts at once (a cluster), a run's exit decoding goes in its main job (`per_run`); where
the calls are written into the folder, the recipe goes without its tokens (`without_tokens`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TypeVar

from ..tasks import AnyRecipe, get_task
from ..trainers.signals import SaveOnSignal
from ..utils.interrupt import in_requeueable_job, requeued_for
from ..utils.types import Kwargs
from .phases import Job, run_job
from .record import RunRecord, read_run_record, write_run_record

R = TypeVar("R", bound=AnyRecipe)  # a recipe, of whatever task: the same type back

BY_SLURM = "requeued by Slurm (preempted, or `scontrol requeue`)"
UNNOTED = "requeued again while it started, its reason not kept"


def per_run(queue: list[Job]) -> list[Job]:
    """The queue as one job per run: its main phases and its exit decoding together (where every job starts at once
    on devices of its own, the exits need not wait for the other runs)."""
    merged: dict[str, Job] = {}
    for job in queue:
        if (first := merged.get(job.run.name)) is None:
            merged[job.run.name] = job
        else:
            merged[job.run.name] = dataclasses.replace(
                first, phases=first.phases + job.phases, restart=first.restart or job.restart
            )
    return list(merged.values())


def without_tokens(recipe: R) -> R:
    """The recipe without the trainer config's tokens (`hub_token`): submitit pickles the job into the study
    folder, where no secret goes; the job reads HF_TOKEN from its environment as the Hub client does."""
    training = recipe.training
    tokens: Kwargs = {f.name: None for f in dataclasses.fields(training) if f.name.endswith("_token") and f.init}
    if not any(getattr(training, name) for name in tokens):
        return recipe
    return dataclasses.replace(recipe, training=dataclasses.replace(training, **tokens))


def requeue_note(job: Job) -> str:
    """Where a job warned of its time limit notes it before submitit requeues it (`utils.slurm_job.Requeueable`),
    beside the run's folder; the next start moves the note into the run's record (`job_main`)."""
    return job.folder.rstrip("/") + ".requeued.json"


def requeues_since(
    noted: list[dict[str, str | int]], job_id: str, restarts: int, why: Callable[[], str]
) -> list[dict[str, str | int]]:
    """The requeues of job `job_id` its record has not noted, one per Slurm restart since the last noted (`restarts`:
    `SLURM_RESTART_COUNT`): the last for `why()` (what the note says, else Slurm's requeue), each before it for a
    reason not kept (a job requeued again while it started, before it noted the requeue before)."""
    last = sum(r.get("job") == job_id for r in noted)
    if restarts <= last:
        return []
    unnoted: list[dict[str, str | int]] = [
        {"why": UNNOTED, "restart": r, "job": job_id} for r in range(last + 1, restarts)
    ]
    return [*unnoted, {"why": why(), "restart": restarts, "job": job_id}]


def job_main(job: Job) -> RunRecord:
    """What a run's job does each time it starts (see the module docstring); a requeued job never starts its run
    over."""
    key = get_task(job.task).headline.key
    job_id, restarts = os.environ.get("SLURM_JOB_ID", ""), int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    record = read_run_record(job.study, job.run, key) or RunRecord(job.run.name)
    left = tuple(p for p in job.phases if not record.done(p))
    note = requeue_note(job)
    if added := requeues_since(record.requeues, job_id, restarts, lambda: requeued_for(note, BY_SLURM)):
        record.requeues += [{**r, "phase": left[0] if left else "none"} for r in added]
        if job.writes:
            write_run_record(job.study, record, key)
    if os.path.isfile(note):  # read, or left by an earlier job of the run that did not start again
        os.remove(note)
    if not left:
        return record
    callbacks = [SaveOnSignal()] if in_requeueable_job() else []
    return run_job(dataclasses.replace(job, phases=left, restart=job.restart and restarts == 0), callbacks)


slurm_job = job_main  # its name before `launch`: jobs submitted by the last release unpickle it by this name
