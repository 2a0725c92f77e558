"""
Keep host memory that PyTorch frees inside the process, for CPU training (`host_allocator='reuse'`, which the
`constrained-sft` command applies to its own process: `cli.base.own_process`; the trainers never call it).

A CPU training step allocates and frees the same large tensors every step: activations, the LM head's logits tiles
(`[1024, 32768]` fp32 = 128 MiB for SmolLM2 at 4 x 256), every parameter gradient (`zero_grad(set_to_none=True)`).
glibc's malloc serves blocks above its mmap threshold (at most 32 MiB) with a fresh `mmap` and returns them with
`munmap`, and trims the heap's free top, so the next step's tensors are new pages the kernel zero-fills on first
touch: a SmolLM2 step spends a large share of its wall time faulting pages in (the performance guide has the
figures). With mmap off and trimming off, freed blocks stay in the heap and the next step reuses them (0 faults per
step once the heap has grown).

Why hand-written: PyTorch exposes no CPU caching allocator to Python, and jemalloc / tcmalloc (what
`torch.backends.xeon.run_cpu` preloads) must be in `LD_PRELOAD` before the process starts, which a trainer built
inside a running process cannot do. `mallopt` is glibc's documented interface for exactly these two settings.
"""

from __future__ import annotations

import ctypes
import logging
import platform

logger = logging.getLogger(__name__)

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
_applied = False


def reuse_freed_host_memory() -> bool:
    """
    Turn off glibc's mmap for large blocks and its heap trimming, for the rest of the process (mallopt cannot undo
    them: it would also switch glibc's adaptive thresholds off). The process keeps its peak heap and reuses it, so
    its peak resident memory is somewhat higher (measured in the performance guide). Returns whether it applied: False off glibc (macOS, musl), where nothing changes. Idempotent.
    """
    global _applied
    if _applied:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        logger.debug("host_allocator='reuse' needs glibc; %s keeps its own settings.", platform.libc_ver())
        return False
    libc = ctypes.CDLL(None)
    # -1 disables trimming altogether (mallopt(3)); 0 mmapped blocks: every block comes from the heap
    _applied = bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, -1))
    if _applied:
        logger.info("CPU training: freed host memory is kept for reuse (glibc mmap and heap trimming off).")
    return _applied
