"""
Which device(s) each of a `--jobs` pool's workers holds on a machine with several GPUs: the visible GPUs split into
groups of `--gpus_per_run`, worker i pinned to group i mod groups (`CUDA_VISIBLE_DEVICES`, set in the worker before
CUDA starts). With no more workers than groups no two runs share a device and the plan prices them so; more workers
than groups share them evenly (`sharing`), as `--jobs` on one GPU does. On a machine without GPUs every worker shares
the CPU. A run with `--gpus_per_run` > 1 trains under `accelerate launch` on its group (`launched`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

VISIBLE = "CUDA_VISIBLE_DEVICES"


def visible_devices() -> list[str]:
    """This machine's GPUs as `CUDA_VISIBLE_DEVICES` names them (or 0..n-1 where it is unset); none without CUDA.
    Counted without starting CUDA in this process (torch asks NVML), so workers can still be pinned after."""
    if (given := os.environ.get(VISIBLE)) is not None:
        devices = [d.strip() for d in given.split(",") if d.strip() and d.strip() != "-1"]
        if repeated := sorted({d for d in devices if devices.count(d) > 1}):
            raise ValueError(
                f"{VISIBLE}={given} names GPU {', '.join(repeated)} more than once: two runs would share a device "
                "the plan counts as two; name each GPU once."
            )
        return devices
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


@dataclass(frozen=True)
class DeviceSlots:
    """The device groups of a study's workers (`assign`); `groups` empty: no GPUs, every worker shares the CPU."""

    groups: tuple[tuple[str, ...], ...]
    workers: int

    @classmethod
    def assign(cls, devices: list[str], jobs: int, per_run: int) -> DeviceSlots:
        """`jobs` workers on `devices` in groups of `per_run`; refused where one run needs more GPUs than exist."""
        if not devices:
            if per_run > (cores := os.cpu_count() or 1):  # without GPUs a run's processes are CPU processes
                raise ValueError(
                    f"`--gpus_per_run` {per_run}: this machine has no GPU, and a run's {per_run} processes on the "
                    f"CPU need as many cores; it has {cores}."
                )
            return cls((), jobs)
        if per_run > len(devices):
            raise ValueError(
                f"`--gpus_per_run` {per_run}: this machine has {len(devices)} GPU(s) ({', '.join(devices)})."
            )
        count = min(jobs, len(devices) // per_run)
        return cls(tuple(tuple(devices[g * per_run : (g + 1) * per_run]) for g in range(count)), jobs)

    def of(self, worker: int) -> tuple[str, ...]:
        """Worker `worker`'s devices (none on a machine without GPUs)."""
        return self.groups[worker % len(self.groups)] if self.groups else ()

    @property
    def sharing(self) -> int:
        """Runs sharing one device when every worker is busy (1: each on its own)."""
        return math.ceil(self.workers / len(self.groups)) if self.groups else self.workers

    def describe(self) -> str:
        if not self.groups:
            return "sharing this machine" if self.workers > 1 else "on this machine"
        shown = ", ".join("GPU " + "+".join(g) for g in self.groups)
        if self.sharing == 1:
            return f"each on its own device(s) ({shown})"
        return f"{self.sharing} runs sharing each of {shown}"


@dataclass(frozen=True)
class Machine:
    """This machine's GPUs (`visible_devices`) and the devices each run holds (`--gpus_per_run`)."""

    devices: tuple[str, ...]
    per_run: int = 1

    def slots(self, jobs: int) -> DeviceSlots:
        return DeviceSlots.assign(list(self.devices), jobs, self.per_run)

    def sharing(self, jobs: int) -> int:
        """Runs sharing one device with `jobs` at once (what the plan prices a phase at)."""
        return self.slots(jobs).sharing


def pin(devices: tuple[str, ...]) -> None:
    """This process sees `devices` only (before CUDA starts in it); nothing on a machine without GPUs."""
    if devices:
        os.environ[VISIBLE] = ",".join(devices)


def held() -> tuple[int, str | None]:
    """(this process's id, the devices it sees): what a worker holds, for its log line and the assignment's tests."""
    return os.getpid(), os.environ.get(VISIBLE)
