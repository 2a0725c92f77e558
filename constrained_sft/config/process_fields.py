"""
What the `constrained-sft` command sets for the process it owns (`ProcessArguments`): settings that change the whole
process rather than one run, so a library never applies them on its own. The command applies them before the task
runs (`cli.base.own_process`); a trainer built from Python leaves its host process as it found it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias, get_args

from ..utils.fields import check_fields

HostAllocator: TypeAlias = Literal["reuse", "system"]
HOST_ALLOCATORS: tuple[HostAllocator, ...] = get_args(HostAllocator)


@dataclass
class ProcessArguments:
    """The command's process settings (flags and recipe keys of the commands that train)."""

    host_allocator: HostAllocator = field(
        default="reuse",
        metadata={
            "help": "Training on the CPU: 'reuse' keeps the host memory PyTorch frees inside the process for the next "
            "step's tensors (glibc's mmap and heap trimming off), so a step does not page-fault its tensors in again "
            "(faster, for somewhat more peak memory: the performance guide has the figures); 'system' leaves the C "
            "library's defaults. The command applies it to its own process before training; a trainer built from "
            "Python never changes its process (call `constrained_sft.trainers.host_allocator.reuse_freed_host_memory()` "
            "yourself to get it). No effect on GPU training, nor off glibc."
        },
    )

    def __post_init__(self) -> None:
        check_fields(self)
