"""
What a sweep's calls need wherever the launcher runs them (`run.stages`): one storage every worker reaches
(`check_storage`, where the jobs run elsewhere), the storage URL in the environment (`storage_in_env`), and the
calls followed to their ends (`follow`).

The storage URL's password never reaches a file: a call carries the URL without it, and the job reads the whole URL
from its environment (`STORAGE_ENV`, set here while the calls are submitted and run; sbatch passes it to the jobs;
or keep the password in ~/.pgpass, which PostgreSQL's driver reads).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence

from ..launch import Handle, JobEnded, Launcher

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


@contextlib.contextmanager
def storage_in_env(storage: str | None) -> Iterator[None]:
    """`STORAGE_ENV` holding the whole URL the user gave while the stages' calls are submitted and run, then as it
    was (none given: the sweep's own SQLite file, which holds no password)."""
    if storage is None:
        yield
        return
    before = os.environ.get(STORAGE_ENV)
    os.environ[STORAGE_ENV] = storage
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(STORAGE_ENV, None)
        else:
            os.environ[STORAGE_ENV] = before


def follow(where: Launcher, handles: Sequence[Handle], enough: Callable[[], bool] = lambda: False) -> list[str] | None:
    """Every handle followed to its end: one line for each that ended without its result (`launch.JobEnded`); None
    where the launcher does not follow its jobs. Once `enough()` (asked as each ends), those not started yet are
    cancelled (a search that holds its trials needs no more workers). A call's own error, where it ran here, is
    raised."""
    left, ended, cancelled = list(handles), [], False
    while left:
        done = where.wait(left)
        if not done:
            return None
        for handle in done:
            left = [h for h in left if h is not handle]
            try:
                handle.result()
            except JobEnded as why:
                ended.append(f"{handle.name}: {why}")
        if left and not cancelled and enough():
            where.cancel(left)
            cancelled = True
    return ended
