"""
A sweep on a Slurm cluster (`--launcher slurm --workers N`): N search workers submitted as Slurm jobs against the
sweep's shared storage (PostgreSQL: Optuna's RDB, as workers started by hand on several machines use it), each the
same sweep at `--stage search` (`worker`), then, with `--stage all` / `compare`, the retraining and comparison as one
more job whose results come back to the command (`finals`). The jobs are recorded in `slurm/jobs.json` under its
lock (`utils.slurm_ledger.Ledger`), and each carries the sweep folder's tag in its Slurm comment: a second call asks
the queue for the sweep's jobs, follows the workers still queued or running and submits only the missing ones, none
once the search holds its trials.

The storage URL's password never reaches a file: the pickled settings carry the URL without it, and the job reads
the whole URL from its environment (`STORAGE_ENV`, which sbatch passes from the submitting shell; or keep the
password in ~/.pgpass, which PostgreSQL's driver reads).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import cast

from ..tasks import AnyRecipe, get_task
from ..utils.redact import redact_url
from ..utils.slurm import Cluster, SlurmArguments, SlurmJobsError
from ..utils.slurm_ledger import Ledger
from .arguments import SweepArguments
from .results import SweepResults

STORAGE_ENV = "CONSTRAINED_SFT_SWEEP_STORAGE"
WORKER, FINALS = "worker", "compare"


def check_storage(storage: str) -> None:
    """Workers on several nodes share one storage server: SQLite, a file one process locks at a time on one
    machine's disk, is refused."""
    if storage.startswith("sqlite"):
        raise ValueError(
            "`--launcher slurm`: the workers need a storage every node reaches: give `--storage` a PostgreSQL URL "
            "(postgresql+psycopg://user@host/db), not SQLite."
        )


def sweep_job(
    run: Callable[..., SweepResults],
    task: str,
    settings: SweepArguments,
    recipe: AnyRecipe,
    more: dict[str, AnyRecipe],
) -> SweepResults:
    """What a sweep job runs: the sweep (`run`: `sweep.run.run`, handed in by reference) here, its storage URL whole
    from the environment."""
    storage = os.environ.get(STORAGE_ENV) or settings.storage
    return run(dataclasses.replace(settings, storage=storage), get_task(task), recipe, more)


def submit_workers(
    cluster: Cluster, ledger: Ledger, call: tuple[object, ...], workers: int, done: Callable[[], bool]
) -> dict[str, str]:
    """{name: job id} of the workers to follow: those queued or running, and, while the search is not `done`, new
    ones up to `workers`; under the ledger's lock, so two calls at once submit `workers` in all."""
    with ledger.locked():
        active = ledger.active(cluster)  # the queue's word, the ledger repaired from it
        following = {n: i for n, i in active.items() if n.startswith(WORKER)}
        if not done():
            taken = {n for n in [*ledger.last(), *active] if n.startswith(WORKER)}
            fresh = (f"{WORKER}-{k}" for k in range(workers + len(taken)) if f"{WORKER}-{k}" not in taken)
            for name in [next(fresh) for _ in range(workers - len(following))]:
                following[name] = cluster.submit(ledger.logs, ledger.tag, name, cluster.gpus(1), sweep_job, *call)
                ledger.add(name, following[name])
    return following


def submit_finals(cluster: Cluster, ledger: Ledger, call: tuple[object, ...], gpus: int) -> str:
    """The id of the compare job to follow: one queued or running, else a new one (under the ledger's lock)."""
    with ledger.locked():
        if (running := ledger.active(cluster).get(FINALS)) is not None:
            return running
        job_id = cluster.submit(ledger.logs, ledger.tag, FINALS, gpus, sweep_job, *call)
        ledger.add(FINALS, job_id)
        return job_id


def on_slurm(
    cluster: Cluster,
    folder: str,
    settings: SweepArguments,
    task: str,
    recipe: AnyRecipe,
    more: dict[str, AnyRecipe],
    searched: Callable[[], bool],
    run: Callable[..., SweepResults],
) -> SweepResults | None:
    """The sweep's stages as Slurm jobs (see the module docstring): the workers until the search is done
    (`searched`), then the finals' job, whose results are returned (each job runs the sweep: `run`); None where
    `--wait false` returned first or the stage is `search`."""
    options: SlurmArguments = cluster.options
    storage = settings.storage or ""
    check_storage(storage)
    os.environ[STORAGE_ENV] = storage  # sbatch hands the submitting environment to the jobs
    ledger = Ledger(os.path.join(folder, "slurm"), "--sweep_dir")
    safe = dataclasses.replace(settings, storage=redact_url(storage))  # what the pickle in the folder carries
    if settings.stage in ("search", "all"):
        call = (run, task, dataclasses.replace(safe, stage="search"), recipe, more)
        workers = submit_workers(cluster, ledger, call, settings.workers, searched)
        if workers:
            print(
                f"slurm: search workers {', '.join(f'{n} ({i})' for n, i in workers.items())}; logs in {ledger.logs}"
            )
        if not options.wait:
            return None
        cluster.follow(ledger.logs, workers)
        if not searched():
            failed = [f"{n}: {cluster.ended(ledger.logs, i)}" for n, i in workers.items()]
            raise SlurmJobsError(
                "the search workers ended before the search held its trials: " + "; ".join(failed) + ". The same "
                "command submits workers again; the trials finished so far are kept."
            )
    if settings.stage == "search":
        return None
    call = (run, task, dataclasses.replace(safe, stage="compare"), recipe, more)
    job_id = submit_finals(cluster, ledger, call, cluster.gpus(1))
    print(f"slurm: the finals' retraining and comparison, job {job_id}; logs in {ledger.logs}")
    if not options.wait:
        return None
    cluster.follow(ledger.logs, {FINALS: job_id})
    from ..utils.slurm_watch import QueueJob

    try:  # submitit's result, or the job's own error: `Cluster.ended` says it
        return cast(SweepResults, QueueJob(folder=os.path.join(ledger.logs, "%j"), job_id=job_id).result())
    except Exception:
        raise SlurmJobsError(
            f"the finals' job ended unfinished: {cluster.ended(ledger.logs, job_id)}. The same command submits it "
            "again; finished retrainings are kept."
        ) from None
