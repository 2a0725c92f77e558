"""
The study on a Slurm cluster (`--launcher slurm`): every run with phases left becomes one Slurm job doing them in
order (`phases.run_job`, as `--jobs` workers do them here), submitted through submitit with its logs under
`slurm/logs/<job id>/`. The job ids go into `slurm/jobs.json` under a lock, before the lock is let go, and every job
carries the study folder's tag and its run in its Slurm comment: a second call, at once or later, asks the queue for
the study's jobs (`utils.slurm_ledger.Ledger.active`, so a lost or edited ledger never doubles a run nor follows
another's job), finds a run's job still queued or running and follows it instead of submitting it again; a run
whose last job ended without recording every phase (failed, timed out, cancelled, preempted) is submitted again and
goes on from its last recorded phase (its records) and its last checkpoint (`phases.train` resumes).

The command follows the jobs (`follow`: the queue read with `squeue`, less often as time goes by: `Cluster.follow`) and, once every
run is recorded, goes on to the study's finish in this process; `--wait false` returns after submitting. Ctrl-C
stops following, not the jobs: it says which keep running and how to cancel them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from ..tasks import AnyRecipe
from ..utils.slurm import Cluster
from ..utils.slurm_ledger import Ledger
from .phases import Job, run_job
from .record import RunRecord, read_record


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
            job_id = cluster.submit(ledger.logs, ledger.tag, name, gpus, run_job, job)
            ledger.add(name, job_id, phases=list(job.phases))
            following[name] = (job, job_id)
            new.append(name)
    return Submitted(following, new)


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

    cluster.follow({name: job_id for name, (_, job_id) in following.items()}, ended)
    return failed
