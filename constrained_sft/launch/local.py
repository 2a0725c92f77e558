"""
The launchers of this machine: `InProcess` runs each call here, one at a time, when it is waited for (under an
`accelerate launch` every process runs every call, as the trainers expect); `DevicePool` runs up to `jobs` calls at
once in spawned workers, worker i holding device group i for its life (`devices.DeviceSlots`: no call lands on
devices another worker holds; on a machine without GPUs they share the CPU). Neither outlives the command: a call's
error is raised as it was.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import TYPE_CHECKING

from .base import Call, Capabilities, Handle, JobEnded, Launcher
from .devices import DeviceSlots, Machine, pin

if TYPE_CHECKING:
    from multiprocessing.context import SpawnContext
    from multiprocessing.queues import Queue

CANCELLED = "cancelled before it started"
HERE = Capabilities(at_once=1, time_budget=True, processes=True, detached=False, follows=True, said="this process")


def pool_capabilities(jobs: int) -> Capabilities:
    """A `DevicePool` of `jobs` workers: single-process calls side by side, on this machine, while it waits."""
    return Capabilities(
        at_once=jobs,
        time_budget=True,
        processes=False,
        detached=False,
        follows=True,
        said=f"`--jobs` {jobs} runs single-process calls side by side",
    )


@dataclass
class LocalHandle:
    """A call run here when first waited for (`InProcess`), or in a pool's worker (`future`)."""

    call: Call
    future: Future[object] | None = None
    done: bool = False
    value: object = None
    error: BaseException | None = None

    @property
    def name(self) -> str:
        return self.call.name

    @property
    def job_id(self) -> str:
        return str(os.getpid())

    def result(self) -> object:
        if self.future is not None and self.future.cancelled():
            raise JobEnded(CANCELLED)
        if self.future is not None:
            return self.future.result()  # a worker's error, raised here naming the call's traceback
        if self.error is not None:
            raise self.error
        return self.value


class InProcess:
    """See the module docstring."""

    capabilities = HERE

    def sharing(self, jobs: int) -> int:
        return 1

    def at_most(self, jobs: int) -> Launcher:
        return self

    def describe(self, jobs: int) -> str:
        return ""

    def submit(self, calls: Sequence[Call]) -> list[Handle]:
        return [LocalHandle(call) for call in calls]

    def wait(self, handles: Sequence[Handle]) -> list[Handle]:
        first = next(h for h in handles if isinstance(h, LocalHandle))
        if not first.done:
            first.done = True
            try:
                first.value = first.call.function(*first.call.args)
            except Exception as error:  # raised by `result`, where the caller asks
                first.error = error
        return [first]

    def cancel(self, handles: Sequence[Handle]) -> None:
        for handle in handles:
            if isinstance(handle, LocalHandle) and not handle.done:
                handle.done, handle.error = True, JobEnded(CANCELLED)

    def close(self) -> None:
        return None


@dataclass
class DevicePool:
    """See the module docstring. The workers start with the first call and end with `close`."""

    machine: Machine
    jobs: int
    pool: ProcessPoolExecutor | None = field(default=None, init=False)

    @property
    def capabilities(self) -> Capabilities:
        return pool_capabilities(self.jobs)

    @property
    def slots(self) -> DeviceSlots:
        return self.machine.slots(self.jobs)

    def sharing(self, jobs: int) -> int:
        return self.machine.sharing(jobs)

    def at_most(self, jobs: int) -> Launcher:
        return self if jobs >= self.jobs else (DevicePool(self.machine, jobs) if jobs > 1 else InProcess())

    def describe(self, jobs: int) -> str:
        return f", {self.machine.slots(jobs).describe()}"

    def submit(self, calls: Sequence[Call]) -> list[Handle]:
        if self.pool is None:
            self.pool = worker_pool(self.slots, max(1, (os.cpu_count() or 1) // self.jobs))
        return [LocalHandle(call, self.pool.submit(call.function, *call.args)) for call in calls]

    def wait(self, handles: Sequence[Handle]) -> list[Handle]:
        futures = {h.future: h for h in handles if isinstance(h, LocalHandle) and h.future is not None}
        finished, _ = wait(futures, return_when=FIRST_COMPLETED)
        return [futures[f] for f in finished]

    def cancel(self, handles: Sequence[Handle]) -> None:
        for handle in handles:  # a call a worker has taken (or queued for itself) runs on
            if isinstance(handle, LocalHandle) and handle.future is not None:
                handle.future.cancel()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)  # a worker's error leaves the others to finish their calls first
            self.pool = None


def worker_pool(slots: DeviceSlots, threads: int, context: SpawnContext | None = None) -> ProcessPoolExecutor:
    """`slots.workers` spawned workers (a fresh interpreter each: no CUDA state, no process group inherited),
    worker i holding `slots.of(i)` for its life, with `threads` torch threads each."""
    context = context or get_context("spawn")
    groups = context.Queue()
    for worker in range(slots.workers):
        groups.put(slots.of(worker))
    return ProcessPoolExecutor(
        slots.workers, mp_context=context, initializer=worker_init, initargs=(threads, os.getpid(), groups)
    )


def worker_init(threads: int, parent: int, groups: Queue[tuple[str, ...]]) -> None:
    """A worker's start: its devices (one group off `groups`, a queue: one per worker, before CUDA starts), its
    threads, and its end with the command's."""
    pin(groups.get())
    import torch

    torch.set_num_threads(threads)
    follow_parent(parent)


def follow_parent(parent: int, every: float = 1.0) -> None:
    """End this worker within `every` seconds of the command that started it (`parent`, its process id) ending,
    however it ends: a command killed with SIGKILL runs no clean-up, and a worker left running would go on writing
    into its folder while the next call starts the same work. A daemon thread polls the parent (written by hand:
    the pool stops its workers only when the command exits normally)."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(1)  # what was written so far is whole (atomic writes); the call in flight is done again

    threading.Thread(target=watch, name="follow-parent", daemon=True).start()
