"""
How the evaluation commands' `generate()` calls decode: eagerly (transformers' dynamic KV cache, the default) or
compiled (`--compile true`): transformers' own compiled decoding, a static KV cache and a `torch.compile`d forward for
the decoding steps (`cache_implementation="static"`, `CompileConfig`), with the cache sized once for a whole run
(`max_cache_len`) so that batches of other prompt lengths reuse the compiled step instead of recompiling it. The
prefill stays eager (transformers compiles the steps only). The embedding noise rides inside the compiled step
because it is drawn ahead of it (`noise.noisy_decoding`).

The first compiled call pays the compile (40 s at batch 8 and 80 s at batch 32 for SmolLM2-135M on 2 CPU cores with
inductor's disk cache empty, against 5 s and 13 s eager: `benchmarks/compiled_decoding.py`), a smaller last batch
once more; a warm step gains 13% at batch 8 and loses 7% at batch 32 (docs/guides/performance.md), which is why eager
stays the default.
"""

from __future__ import annotations

import torch
from transformers import CompileConfig

from ..utils.types import Kwargs


def compiled_decoding(device: torch.device, cache_len: int) -> Kwargs:
    """`generate()` arguments for compiled decoding on `device` with a static cache of `cache_len` positions (the
    longest prompt of the run plus its new tokens). CUDA: transformers' default config (inductor, CUDA graphs:
    `mode="reduce-overhead"`); elsewhere inductor's default mode, and transformers' switch that lets it compile off
    GPUs (`_compile_all_devices`, which it otherwise reserves for CUDA; it has no public one: the day transformers
    stops reading it, nothing compiles off CUDA and `tests/noise/test_decoding_noise.py`, which counts one compiled
    graph on CPU, fails)."""
    if device.type == "cuda":
        config = CompileConfig()
    else:
        config = CompileConfig(mode="default")
        config._compile_all_devices = True  # type: ignore[assignment]  # transformers types it as None
    return {"cache_implementation": "static", "compile_config": config, "max_cache_len": cache_len}
