"""
What the data checks cost, and what streaming costs per step.

1. Construction of `ConstrainedSFTTrainer` on a 1M-row pre-tokenized map-style dataset (TRL's own preparation
   skipped, `dataset_kwargs={"skip_prepare_dataset": True}`, so the trainer's checks are what is timed), in a fresh
   process per code version: wall time, and the peak resident memory of the construction alone (Linux's high-water
   mark, reset just before it through /proc/self/clear_refs) above the memory before it. `--baseline-code DIR` also
   runs another checkout (a `git worktree` of an older commit), for before -> after.
2. Step time of the same rows map-style and streamed (`Dataset.to_iterable_dataset()`), tiny Llama, constraints on:
   the median of the timed steps, in one process, interleaved over `--repeats`; streamed / map-style per repeat, and
   their geometric mean with a 95% t-interval.

    python benchmarks/streaming.py --out benchmarks/results/streaming_cpu.json [--baseline-code /tmp/before]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from host_memory import reset_peak_rss, status_mib
from intervals import ratio_interval
from provenance import source_commit

ROWS, LENGTH = 1_000_000, 64


def tokenized_rows(rows: int, length: int):
    """`rows` rows of `length` token ids as one Arrow list column, built without Python lists."""
    import numpy as np
    import pyarrow as pa
    from datasets import Dataset

    values = pa.array((np.arange(rows * length, dtype=np.int32) % 29) + 3)
    offsets = pa.array(np.arange(0, rows * length + 1, length, dtype=np.int32))
    return Dataset(pa.table({"input_ids": pa.ListArray.from_arrays(offsets, values)}))


def construct(folder: str) -> dict:
    """One trainer construction on the tokenized rows saved in `folder` (memory-mapped, so the process's peak RSS is
    what construction reads): its seconds and peak RSS (MiB)."""
    import warnings

    warnings.filterwarnings("ignore")
    from datasets import load_from_disk

    from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
    from constrained_sft.testing import tiny_causal_lm, tiny_tokenizer

    data = load_from_disk(folder)
    model, tokenizer = tiny_causal_lm("llama"), tiny_tokenizer()
    args = ConstrainedSFTConfig(
        output_dir=tempfile.mkdtemp(prefix="streaming-bench-"), report_to="none", bf16=False, use_cpu=True, max_steps=1,
        dataset_kwargs={"skip_prepare_dataset": True}, max_length=None,
    )  # fmt: skip
    reset_peak_rss()  # VmHWM := VmRSS: the peak below is the construction's own
    before = status_mib("VmRSS")
    start = time.perf_counter()
    ConstrainedSFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer)
    seconds = time.perf_counter() - start
    peak = status_mib("VmHWM")
    import constrained_sft

    return {
        "seconds": seconds, "rss_before_mib": before, "peak_rss_mib": peak, "peak_above_before_mib": peak - before,
        "package": constrained_sft.__file__,
    }  # fmt: skip


def step_times(steps: int, repeats: int) -> dict:
    """Median step time, map-style against streamed, `repeats` alternating runs of `steps` steps each."""
    import warnings

    warnings.filterwarnings("ignore")
    from transformers import TrainerCallback

    from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
    from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

    class Clock(TrainerCallback):
        def __init__(self):
            self.times, self.start = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.start)

    out: dict[str, list[float]] = {"map-style": [], "streamed": []}
    ratios = []  # streamed / map-style, the medians of one repeat each
    rows = successor_dataset(8 * (steps + 1))
    for _ in range(repeats):
        medians = {}
        for name in out:
            args = ConstrainedSFTConfig(
                output_dir=tempfile.mkdtemp(prefix="streaming-bench-"), report_to="none", bf16=False, use_cpu=True, max_steps=steps,
                per_device_train_batch_size=8, save_strategy="no", disable_tqdm=True, dual_lr=0.5,
            )  # fmt: skip
            data = rows.to_iterable_dataset() if name == "streamed" else rows
            clock = Clock()
            trainer = ConstrainedSFTTrainer(
                model=tiny_causal_lm("llama"), args=args, train_dataset=data, processing_class=tiny_tokenizer(),
                callbacks=[clock],
            )  # fmt: skip
            trainer.train()
            out[name] += clock.times[1:]  # the first step warms up
            medians[name] = statistics.median(clock.times[1:])
        ratios.append(medians["streamed"] / medians["map-style"])
    result = {name: {"median_step_s": statistics.median(t), "steps": len(t)} for name, t in out.items()}
    return {**result, "streamed_over_map_style_per_repeat": ratios, "streamed_over_map_style": geometric(ratios)}


def geometric(ratios: list[float]) -> dict:
    """The per-repeat ratios' geometric mean and its 95% t-interval (`intervals.ratio_interval`) as the JSON keeps them."""
    mean, (low, high) = ratio_interval(ratios)
    return {"geometric_mean": mean, "ci95": [low, high]}


def child(flag: str, code: str | None, args: argparse.Namespace) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if code:
        env["PYTHONPATH"] = os.path.abspath(code)
    cmd = [sys.executable, __file__, flag, "--rows", str(args.rows), "--steps", str(args.steps), "--data", args.data]
    cmd += ["--repeats", str(args.repeats)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=code or None)
    if done.returncode != 0:
        sys.exit(f"{flag} ({code or 'this checkout'}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline-code", help="another checkout, constructed in its own process too")
    parser.add_argument("--out")
    parser.add_argument("--construct", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--steps-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.construct:
        print(json.dumps(construct(args.data)))
        return
    if args.steps_only:
        print(json.dumps(step_times(args.steps, args.repeats)))
        return
    result = {"rows": args.rows, "tokens_per_row": LENGTH, "device": f"CPU ({os.cpu_count()} cores)"}
    args.data = tempfile.mkdtemp(prefix="streaming-bench-data-")
    tokenized_rows(args.rows, LENGTH).save_to_disk(args.data)
    result["construction"] = {"this checkout": child("--construct", None, args)}
    if args.baseline_code:
        commit = source_commit(os.path.join(args.baseline_code, "constrained_sft"))
        name = f"baseline {commit or args.baseline_code}"  # its commit, where it is a checkout
        result["construction"][name] = child("--construct", args.baseline_code, args)
    result["step_time"] = child("--steps-only", None, args)
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
