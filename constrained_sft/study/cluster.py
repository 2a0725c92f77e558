"""
The study on a Slurm cluster (`--launcher slurm`): every run with phases left becomes one Slurm job doing them in
order (`phases.run_job`, as `--jobs` workers do them here), submitted through submitit with its logs under
`slurm/logs/<job id>/`. The job ids go into `slurm/jobs.json` under a lock, before the lock is let go, and every job
carries the study folder's tag and its run in its Slurm comment: a second call, at once or later, asks the queue for
the study's jobs (`utils.slurm_ledger.Ledger.active`, so a lost or edited ledger never doubles a run nor follows
another's job), finds a run's job still queued or running and follows it instead of submitting it again; a run
whose last job ended without recording every phase (failed, timed out, cancelled, preempted) is submitted again and
goes on from its last recorded phase (its records) and its last checkpoint (`phases.train` resumes). A job warned of
its time limit saves a checkpoint and requeues itself (`slurm_job`, `utils.slurm_job.Requeueable`), up to
`--slurm_requeues` times; a preempted one saves and ends, and Slurm requeues it; each requeue is in the run's record.

The command follows the jobs (`follow`: the queue read with `squeue`, less often as time goes by: `Cluster.follow`) and, once every
run is recorded, goes on to the study's finish in this process; `--wait false` returns after submitting. Ctrl-C
stops following, not the jobs: it says which keep running and how to cancel them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass

from ..tasks import AnyRecipe, get_task
from ..trainers.signals import SaveOnSignal
from ..utils.slurm import Cluster
from ..utils.slurm_job import requeued_for
from ..utils.slurm_ledger import Ledger
from .phases import Job, run_job
from .record import RunRecord, read_record, write_record

BY_SLURM = "requeued by Slurm (preempted, or `scontrol requeue`)"


def per_run(queue: list[Job]) -> list[Job]:
    """The queue as one job per run: its main phases and its exit decoding together (a Slurm job holds its own
    devices, so the exits need not wait for the other runs)."""
    merged: dict[str, Job] = {}
    for job in queue:
        if (first := merged.get(job.run.name)) is None:
            merged[job.run.name] = job
        else:
            merged[job.run.name] = dataclasses.replace(
                first, phases=first.phases + job.phases, restart=first.restart or job.restart
            )
    return list(merged.values())


def without_tokens(recipe: AnyRecipe) -> AnyRecipe:
    """The recipe without the trainer config's tokens (`hub_token`): submitit pickles the job into the study
    folder, where no secret goes; the job reads HF_TOKEN from its environment as the Hub client does."""
    training = recipe.training
    tokens = {f.name: None for f in dataclasses.fields(training) if f.name.endswith("_token") and f.init}
    if not any(getattr(training, name) for name in tokens):
        return recipe
    return dataclasses.replace(recipe, training=dataclasses.replace(training, **tokens))


@dataclass
class Submitted:
    """The runs this call follows ({run name: (job, Slurm job id)}): found queued or running, or submitted now."""

    following: dict[str, tuple[Job, str]]
    new: list[str]  # the runs this call submitted


def submit(cluster: Cluster, ledger: Ledger, jobs: list[Job], key: str, gpus: int) -> Submitted:
    """Each run of `jobs` whose last job is not queued or running, and which its record still says is unfinished,
    submitted; all under the ledger's lock, so two calls at once submit each run once."""
    following: dict[str, tuple[Job, str]] = {}
    new: list[str] = []
    with ledger.locked():
        active = ledger.active(cluster)
        for job in jobs:
            name = job.run.name
            if name in active:
                following[name] = (job, active[name])
                continue
            record = read_record(job.study, job.run, key)  # read again under the lock: another call may have run it
            left = tuple(p for p in job.phases if not (record and record.done(p)))
            if not left:
                continue
            job = dataclasses.replace(job, phases=left, recipe=without_tokens(job.recipe))
            job_id = cluster.submit(ledger.logs, ledger.tag, name, gpus, slurm_job, job, note=requeue_note(job))
            ledger.add(name, job_id, phases=list(job.phases))
            following[name] = (job, job_id)
            new.append(name)
    return Submitted(following, new)


def requeue_note(job: Job) -> str:
    """Where a job warned of its time limit notes it before submitit requeues it (`utils.slurm_job.Requeueable`),
    beside the run's folder; the next start moves the note into the run's record (`slurm_job`)."""
    return job.folder.rstrip("/") + ".requeued.json"


def slurm_job(job: Job) -> RunRecord:
    """What a run's Slurm job does each time Slurm starts it, first or requeued: a requeue since the last start
    noted in the run's record (why, the phase it was in, Slurm's restart count), then the phases the record still
    lacks, training under `SaveOnSignal` (warned of the time limit or preemption, it saves a checkpoint at the end
    of the step it is in and stops; the next start resumes from it). A requeued job never starts its run over."""
    key = get_task(job.task).headline.key
    job_id, restarts = os.environ.get("SLURM_JOB_ID", ""), int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    record = read_record(job.study, job.run, key) or RunRecord(job.run.name)
    left = tuple(p for p in job.phases if not record.done(p))
    note = requeue_note(job)
    if restarts > sum(r.get("job") == job_id for r in record.requeues):  # this job was requeued since it last began
        why = requeued_for(note, BY_SLURM)
        record.requeues.append({"why": why, "phase": left[0] if left else "none", "restart": restarts, "job": job_id})
        if job.writes:
            write_record(job.study, record, key)
    if os.path.isfile(note):  # read, or left by an earlier job of the run that did not start again
        os.remove(note)
    if not left:
        return record
    return run_job(dataclasses.replace(job, phases=left, restart=job.restart and restarts == 0), [SaveOnSignal()])


def follow(
    cluster: Cluster,
    ledger: Ledger,
    following: dict[str, tuple[Job, str]],
    key: str,
    on_done: Callable[[Job, RunRecord], object],
    on_partial: Callable[[Job, RunRecord], None],
) -> list[str]:
    """Wait for the jobs to leave the queue (`Cluster.follow`, Ctrl-C included); each run whose record then holds
    its phases handed to `on_done`, the others to `on_partial` (the phases they did record). Returns why each
    unfinished run ended, one line each."""
    failed: list[str] = []

    def ended(name: str, job_id: str) -> None:
        job = following[name][0]
        record = read_record(job.study, job.run, key) or RunRecord(name)
        if all(record.done(p) for p in job.phases):
            on_done(job, record)
            return
        on_partial(job, record)
        failed.append(f"{name}: {cluster.ended(ledger.logs, job_id)}")

    cluster.follow(ledger.logs, {name: job_id for name, (_, job_id) in following.items()}, ended)
    return failed
