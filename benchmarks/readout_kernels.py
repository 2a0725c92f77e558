"""
The readout's per-token NLL kernels on one shape, forward + backward: time, peak memory and agreement.

    python benchmarks/readout_kernels.py                       # SmolLM2-135M's head (D 576, V 49152), CPU, fp32
    python benchmarks/readout_kernels.py --device cuda --dtype bf16 --hidden 4096 --vocab 128256   # Llama 3.1 8B

Kernels: `linear_nll` (this library's, CPU), torch's `F.linear_cross_entropy` with its chunked path
(`LinearCrossEntropyOptions()`, torch >= 2.13) and without (the reference: full `[K, V]` logits), and TRL's
`ChunkedLogProbFunction` (the library's kernel off CPU). Protocol: every kernel runs once to warm up, then `--repeats`
rounds, each round running every kernel once in turn (interleaved: drift and other load hit all alike); the table
gives the median and the [min, max] over rounds. Peak memory: CPU, the peak resident set of a fresh process running
one kernel (VmHWM, minus that process's peak before the kernel); CUDA, `max_memory_allocated` above the inputs.
Agreement: the largest |NLL| and |dL/dx| difference against a float64 reference on the same inputs.
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

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def kernels(device: str) -> dict:
    """{name: fn(x, weight, targets) -> [K] fp32 NLL} of the kernels this torch / TRL has."""
    import torch.nn.functional as F

    from constrained_sft.readout.linear_nll import linear_nll

    found = {}
    if device == "cpu":
        found["linear_nll (this library)"] = lambda x, w, t: linear_nll(x, w, None, t)
    if hasattr(F, "linear_cross_entropy"):
        from torch.nn import LinearCrossEntropyOptions

        found["F.linear_cross_entropy chunked"] = lambda x, w, t: F.linear_cross_entropy(
            x, w, t, reduction="none", options=LinearCrossEntropyOptions()
        ).float()
        found["F.linear_cross_entropy reference"] = lambda x, w, t: F.linear_cross_entropy(
            x, w, t, reduction="none"
        ).float()
    try:
        from trl.kernels import ChunkedLogProbFunction

        from constrained_sft.readout.causal_lm import VOCAB_CHUNK

        found["TRL ChunkedLogProbFunction"] = lambda x, w, t: (
            -ChunkedLogProbFunction.apply(x, w, None, t, 1.0, VOCAB_CHUNK, None, 1.0, ())[0].float()
        )
    except ImportError:
        pass
    return found


def inputs(args, dtype: torch.dtype | None = None):
    g = torch.Generator().manual_seed(0)
    dtype = dtype or DTYPES[args.dtype]
    x = torch.randn(args.tokens, args.hidden, generator=g).to(args.device, dtype)
    w = (torch.randn(args.vocab, args.hidden, generator=g) / args.hidden**0.5).to(args.device, dtype)
    t = torch.randint(0, args.vocab, (args.tokens,), generator=g).to(args.device)
    return x.requires_grad_(True), w.requires_grad_(True), t


def run(fn, x, w, t) -> tuple[torch.Tensor, torch.Tensor]:
    nll = fn(x, w, t)
    nll.sum().backward()
    grad = x.grad
    x.grad = w.grad = None
    return nll.detach(), grad


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timings(args) -> dict:
    found = kernels(args.device)
    x, w, t = inputs(args)
    for fn in found.values():
        run(fn, x, w, t)
    times = {name: [] for name in found}
    for _ in range(args.repeats):
        for name, fn in found.items():
            sync(args.device)
            start = time.perf_counter()
            run(fn, x, w, t)
            sync(args.device)
            times[name].append(time.perf_counter() - start)
    xr, wr, tr = inputs(args, torch.float64)
    ref_nll, ref_grad = run(
        lambda a, b, c: torch.nn.functional.cross_entropy(a @ b.T, c, reduction="none"), xr, wr, tr
    )
    rows = {}
    for name, fn in found.items():
        nll, grad = run(fn, x, w, t)
        rows[name] = {
            "median_s": statistics.median(times[name]),
            "min_s": min(times[name]),
            "max_s": max(times[name]),
            "max_nll_error": (nll.double().cpu() - ref_nll.cpu()).abs().max().item(),
            "max_grad_error": (grad.double().cpu() - ref_grad.cpu()).abs().max().item(),
        }
    return rows


def peak_of(args, name: str) -> float:
    """MiB above the process's peak before the kernel (CPU: a fresh process per kernel; CUDA: this one)."""
    if args.device == "cuda":
        x, w, t = inputs(args)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run(kernels("cuda")[name], x, w, t)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    argv = [sys.executable, __file__, "--peak-of", name, "--tokens", str(args.tokens), "--dtype", args.dtype,
            "--hidden", str(args.hidden), "--vocab", str(args.vocab)]  # fmt: skip
    return float(subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="fp32", choices=list(DTYPES))
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--tokens", type=int, nargs="+", default=[464, 8192],
                        help="K per run: 464 = SmolLM2's 29 layers x 16 sampled tokens; 8192 = 16 x 512, all tokens")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--peak-of", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak_of:  # child: one kernel, one shape, print the peak resident set it added (MiB)
        args.tokens = args.tokens[0]
        x, w, t = inputs(args)
        before = peak_rss_mib()
        run(kernels("cpu")[args.peak_of], x, w, t)
        print(peak_rss_mib() - before)
        return
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    results = {}
    all_tokens = args.tokens
    for k in all_tokens:
        args.tokens = k
        rows = timings(args)
        for name in rows:
            rows[name]["peak_mib"] = peak_of(args, name)
        results[k] = rows
        print(f"\nK = {k} tokens, D = {args.hidden}, V = {args.vocab}, {args.device} {args.dtype}, forward + backward")
        print(f"{'kernel':<34} {'median s':>9} {'[min, max]':>17} {'peak MiB':>9} {'NLL err':>9} {'grad err':>9}")
        for name, r in rows.items():
            print(
                f"{name:<34} {r['median_s']:>9.4f} [{r['min_s']:.4f}, {r['max_s']:.4f}] {r['peak_mib']:>9.0f} "
                f"{r['max_nll_error']:>9.1e} {r['max_grad_error']:>9.1e}"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args) | {"tokens": all_tokens}, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
