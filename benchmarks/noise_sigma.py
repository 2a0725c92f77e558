"""
What measuring sigma_x costs: the full-table std the trainers used to compute on every micro-batch (an fp32 copy of
the input embedding matrix, then `std`), against the chunked measurement they now make once per run.

    python benchmarks/noise_sigma.py                 # SmolLM2-135M's table (49152 x 576, fp32) and Llama 3.1 8B's
                                                     # (128256 x 4096, bf16), random weights, CPU
    python benchmarks/noise_sigma.py --out benchmarks/results/noise_sigma_cpu.json

Times are medians of `--repeats` calls; peak memory is the peak RSS growth of a fresh process per (table, method)
over the table itself (RSS peaks never reset within a process).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from host_memory import peak_rss_mib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from constrained_sft.noise.embedding import table_std  # noqa: E402

TABLES = {"smollm2-135m": (49152, 576, torch.float32), "llama-3.1-8b": (128256, 4096, torch.bfloat16)}
METHODS = {
    "per micro-batch (before)": lambda w: w.float().std(unbiased=False).item(),
    "chunked, once per run (now)": table_std,
}


def one(table: str, method: str, repeats: int) -> dict[str, float]:
    rows, cols, dtype = TABLES[table]
    weight = torch.empty(rows, cols, dtype=dtype)
    generator = torch.Generator().manual_seed(0)
    for chunk in weight.split(4096):  # filled in chunks: no full-size float32 intermediate in the peak
        chunk.copy_(torch.randn(chunk.shape, generator=generator))
    before = peak_rss_mib()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        METHODS[method](weight)
        times.append(time.perf_counter() - start)
    return {"seconds": statistics.median(times), "extra_peak_mib": peak_rss_mib() - before}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # internal: table, method in a fresh process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one, args.repeats)))
        return
    rows = []
    for table in TABLES:
        for method in METHODS:
            cmd = [sys.executable, __file__, "--repeats", str(args.repeats), "--one", table, method]
            result = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
            rows.append({"table": table, "method": method, **result})
            print(f"{table:>13} {method:>28}: {result['seconds']:.3f} s, +{result['extra_peak_mib']:.0f} MiB peak")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {"device": f"CPU ({os.cpu_count()} cores)", "torch": torch.__version__, "rows": rows}, f, indent=2
            )


if __name__ == "__main__":
    main()
