"""
`<folder>/slurm/jobs.json`: the jobs a command submitted for its folder, in order, and their logs under
`logs/<job id>/` (submitit's folder). The ledger is the fast path and the history; the queue is the truth. Every job
carries its folder's tag and its name in its Slurm comment (`utils.slurm.Cluster.submit`), so before submitting the
command asks the queue for the folder's jobs (`Ledger.active`): a job the ledger lost (deleted, or written over by
another copy) is taken back from the queue and recorded again, and a job the ledger names that is not the folder's
(an edited file naming someone's other job) is never followed. A ledger that is not a job list this library wrote
is refused in one line naming the file, before any submission.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .files import read_json, write_json
from .types import JSONRead

if TYPE_CHECKING:
    from collections.abc import Iterator


class Queue(Protocol):
    """What the ledger asks the queue (`utils.slurm.Cluster`)."""

    def ours(self, tag: str) -> dict[str, list[str]]:
        """{name: job ids, oldest first} of the queued or running jobs tagged `tag`."""
        ...

    def queued(self, ids: list[str]) -> dict[str, str]:
        """{job id: state} of those of `ids` queued or running."""
        ...


def now() -> str:
    """The time an entry is written, UTC to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def folder_tag(folder: str) -> str:
    """The tag of a command folder's jobs: 10 hex digits of its real path, so the queue's jobs of one folder are
    told from another's (the same folder reached by another path gets the same tag)."""
    return hashlib.sha1(os.path.realpath(folder).encode()).hexdigest()[:10]


@dataclass
class Ledger:
    """A command folder's `slurm/` (`folder`): its jobs.json, the logs, and the lock two copies of the command
    take to see each other's jobs (`locked`: read, submit, write)."""

    folder: str  # the command folder's slurm/
    flag: str  # the command's folder option, for the messages

    @property
    def path(self) -> str:
        return os.path.join(self.folder, "jobs.json")

    @property
    def logs(self) -> str:
        return os.path.join(self.folder, "logs")

    @property
    def tag(self) -> str:
        """The tag every job of the command folder carries (`utils.slurm.folder_tag`)."""
        return folder_tag(os.path.dirname(os.path.abspath(self.folder)))

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The ledger's lock between processes (filelock), held for the block: read, submit, write."""
        from filelock import FileLock

        os.makedirs(self.folder, exist_ok=True)
        with FileLock(self.path + ".lock"):
            yield

    def entries(self) -> list[JSONRead]:
        if os.path.lexists(self.path) and not os.path.isfile(self.path):
            raise ValueError(
                f"`{self.flag}`: {self.path} is not a file; move it away (the queue says which jobs run)."
            )
        data = read_json(self.path, self.flag) if os.path.isfile(self.path) else {"jobs": []}
        jobs = data.get("jobs") if isinstance(data, dict) else None
        if not isinstance(jobs, list) or not all(isinstance(e, dict) and {"name", "job_id"} <= set(e) for e in jobs):
            raise ValueError(
                f"`{self.flag}` {self.path} is not a job list this library wrote; move it away (the queue says "
                "which jobs run)."
            )
        return jobs

    def last(self) -> dict[str, str]:
        """{name: the id of the last job submitted under it}."""
        return {e["name"]: str(e["job_id"]) for e in self.entries()}

    def add(self, name: str, job_id: str, **more: object) -> None:
        entry = {"name": name, "job_id": job_id, **more, "submitted": now()}
        write_json(self.path, {"jobs": [*self.entries(), entry]})

    def active(self, cluster: Queue) -> dict[str, str]:
        """{name: job id} of the folder's jobs the queue holds queued or running (the newest of a name), read from
        the jobs' comments; the ledger repaired where it lacks one, and a job it names that the queue says is
        another's is said and left alone. Call under `locked`."""
        entries = self.entries()
        ours = cluster.ours(self.tag)
        mine = {i for ids in ours.values() for i in ids}
        named = {e["name"]: str(e["job_id"]) for e in entries}  # the last job of each name, as the file says
        named = {name: i for name, i in named.items() if i not in mine}
        recorded = {str(e["job_id"]) for e in entries}
        if lost := [(name, i) for name, ids in ours.items() for i in ids if i not in recorded]:
            found = [{"name": name, "job_id": i, "found_in_queue": now()} for name, i in lost]
            write_json(self.path, {"jobs": [*entries, *found]})
            print(
                f"slurm: {self.path} did not record {', '.join(f'{n} ({i})' for n, i in lost)}: found in the queue "
                "by their comment, recorded again and followed."
            )
        queued = cluster.queued(list(named.values()))  # one reading of the queue for them all
        if strangers := {name: i for name, i in named.items() if i in queued}:
            print(
                f"slurm: {self.path} names {', '.join(f'job {i} for {n}' for n, i in strangers.items())}, which the "
                "queue says is not this folder's (its comment): not followed."
            )
        return {name: ids[-1] for name, ids in ours.items()}
