"""
What `eval generate` costs over plain `model.generate` on the same model, batch and prompts (SmolLM2-135M-Instruct,
greedy, left-padded chat prompts, fp32 on CPU): new tokens per second of

- `plain`: `model.generate(**batch)` alone;
- `eval generate, gamma 0` and `gamma 1.5`: `evaluation.alpaca.generate.generate_level`, what the command and a study
  run per batch: the same `generate` inside `noise.noisy` (a forward pre-hook that reads the attention mask and a
  forward hook on the embedding that adds the noise), a seed per batch, the answers decoded and the file rewritten.

Interleaved over `--repeats` (each repeat times every way once, in a rotated order), after one untimed warm-up each;
the median per way, and each way's ratio to plain per repeat with a 95% t-interval of its geometric mean. Then one
`cProfile` of each of the first two ways, whose top functions by own time say where the difference goes.

    python benchmarks/generate_overhead.py --out benchmarks/results/generate_overhead_cpu.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import time

from provenance import machine, write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import torch
    from intervals import ratio_interval
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from constrained_sft.data.assets import smollm2_path
    from constrained_sft.evaluation.alpaca.generate import GenerateArguments, cache_length, generate_level
    from constrained_sft.evaluation.instructions import prompts_for
    from constrained_sft.noise import embedding_sigma

    torch.set_num_threads(args.threads)
    path = smollm2_path()
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    rows = [
        {"instruction": f"Write one sentence about the number {i}.", "dataset": "bench"} for i in range(args.batch)
    ]
    enc = tokenizer(prompts_for(tokenizer, rows, None), return_tensors="pt", padding=True, add_special_tokens=False)
    sigma = embedding_sigma(model)
    scratch = tempfile.mkdtemp(prefix="generate-bench-")
    decoding = dict(do_sample=False, temperature=None, top_p=None, top_k=None, pad_token_id=tokenizer.pad_token_id)

    def plain() -> int:
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, **decoding)
        return int(out[:, enc["input_ids"].shape[1] :].numel())

    def library(gamma: float):
        config = GenerateArguments(model=path, output_dir=scratch, batch_size=args.batch, sigma_x=sigma,
                                   max_new_tokens=args.new_tokens)  # fmt: skip
        model.generation_config.min_new_tokens = args.new_tokens  # every way decodes exactly as many tokens

        def run() -> int:
            target = os.path.join(scratch, f"gamma_{gamma}.json")
            if os.path.exists(target):
                os.remove(target)
            generate_level(
                model, tokenizer, rows, config, "bench", gamma, target, cache_length(tokenizer, rows, config)
            )
            return args.batch * args.new_tokens

        return run

    ways = {"plain": plain, "eval generate, gamma 0": library(0.0), "eval generate, gamma 1.5": library(1.5)}
    for way in ways.values():
        way()  # warm-up
    seconds = {name: [] for name in ways}
    tokens = {}
    names = list(ways)
    for r in range(args.repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            tokens[name] = ways[name]()
            seconds[name].append(time.perf_counter() - start)
    rows_out = {}
    for name in names:
        ratio, (low, high) = ratio_interval([s / p for s, p in zip(seconds[name], seconds["plain"], strict=True)])
        rows_out[name] = {
            "tokens_per_second": round(tokens[name] / statistics.median(seconds[name]), 1),
            "seconds_median": round(statistics.median(seconds[name]), 3),
            "time_vs_plain": round(ratio, 3),
            "time_vs_plain_ci95": [round(low, 3), round(high, 3)],
        }
        print(f"{name}: {rows_out[name]['tokens_per_second']} new tokens/s, time x{rows_out[name]['time_vs_plain']} "
              f"of plain {rows_out[name]['time_vs_plain_ci95']}")  # fmt: skip
    profiles = {}
    for name in names[:2]:
        profiler = cProfile.Profile()
        profiler.runcall(ways[name])
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
        profiles[name] = text.getvalue().splitlines()[-20:]
    report = {"model": "SmolLM2-135M-Instruct (fp32, CPU)", "batch": args.batch, "new_tokens": args.new_tokens,
              "repeats": args.repeats, "threads": args.threads, "ways": rows_out, "profiles_top_own_time": profiles,
              "machine": machine()}  # fmt: skip
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
