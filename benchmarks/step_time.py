"""
Step time and peak memory of ConstrainedSFTTrainer against plain SFTTrainer on the same model, batch and precision.

    python benchmarks/step_time.py --model tiny
    python benchmarks/step_time.py --model smollm2 --settings sft,all,32 --batch 4 --seq 256

Settings: `sft` (plain SFTTrainer), `none` (constraints off, layers measured), `all` (constraints on every token),
an integer k (constraints on `layer_loss_tokens=k`). Times are interleaved round-robin in one process, so machine
noise hits every setting alike; the median of `--steps` steps after `--warmup` is reported. Peak memory is
`torch.cuda.max_memory_allocated` on GPU and, on CPU, the peak RSS (VmHWM) of a fresh process per setting (RSS
peaks never reset within a process). FLOP estimates count a training step as 6 x params x tokens plus attention (TRL's
estimate) and each extra readout of D x V per token as 2 (measure only) or 8 (forward, backward, recompute) x D x V.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402
from trl.trainer.utils import compute_flops_per_token  # noqa: E402

from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer  # noqa: E402
from constrained_sft.testing import tiny_causal_lm, tiny_tokenizer  # noqa: E402


def load_model(name: str, dtype: torch.dtype, device: str):
    if name == "tiny":
        model, tokenizer = tiny_causal_lm("llama", num_layers=4, hidden=32, vocab=32), tiny_tokenizer()
    else:
        if name == "smollm2":
            from constrained_sft.assets import smollm2_path

            name = smollm2_path()
        model, tokenizer = AutoModelForCausalLM.from_pretrained(name, dtype=dtype), AutoTokenizer.from_pretrained(name)
    return model.to(device=device, dtype=dtype), tokenizer


def make_trainer(setting: str, args: argparse.Namespace, model, tokenizer):
    common = dict(
        output_dir=f"/tmp/bench-{setting}",
        report_to="none",
        bf16=args.dtype == "bf16",
        use_cpu=args.device == "cpu",
        save_strategy="no",
        per_device_train_batch_size=args.batch,
        learning_rate=1e-5,
        disable_tqdm=True,
        max_length=args.seq,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    data = Dataset.from_list([{"text": "x"}] * 4)  # the benchmark feeds its own batch
    if setting == "sft":
        return SFTTrainer(model=model, args=SFTConfig(**common), train_dataset=data, processing_class=tokenizer)
    extra = {"constraints": "none"} if setting == "none" else {"constraints": "descent", "dual_lr": 0.01}
    if setting not in ("none", "all"):
        extra["layer_loss_tokens"] = int(setting)
    config = ConstrainedSFTConfig(**common, **extra)
    return ConstrainedSFTTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer)


def make_batch(args: argparse.Namespace, vocab: int, device: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (args.batch, args.seq), generator=g)
    return {
        "input_ids": ids.to(device),
        "attention_mask": torch.ones_like(ids).to(device),
        "labels": ids.clone().to(device),
    }


def train_step(trainer, batch) -> None:
    num_items = (batch["labels"][:, 1:] != -100).sum()
    trainer.training_step(trainer.model, dict(batch), num_items)
    if hasattr(trainer, "primal_dual"):
        trainer._dual_step()
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def build(setting, args):
    dtype = torch.bfloat16 if args.dtype == "bf16" and args.device != "cpu" else torch.float32
    model, tokenizer = load_model(args.model, dtype, args.device)
    trainer = make_trainer(setting, args, model, tokenizer)
    trainer.create_optimizer()
    return trainer, make_batch(args, model.config.vocab_size, args.device)


def measure_memory(setting: str, args: argparse.Namespace) -> float:
    """Peak memory in MiB of `--warmup + 2` steps of one setting, in this (fresh) process."""
    trainer, batch = build(setting, args)
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    for _ in range(args.warmup + 2):
        train_step(trainer, batch)
    sync(args.device)
    if args.device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return peak_rss_mib()


def peak_rss_mib() -> float:
    """This process's peak RSS. Not `ru_maxrss`: Linux carries the parent's peak into a child across exec."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform != "darwin" else 2**20)


def flop_estimate(config, args, setting: str) -> float:
    """Estimated step FLOPs relative to plain SFT."""
    tokens = args.batch * args.seq
    base = compute_flops_per_token(config, args.seq) * tokens
    if setting == "sft":
        return 1.0
    readouts = config.num_hidden_layers - 1
    per_token = config.hidden_size * config.vocab_size
    read = tokens if setting in ("none", "all") else min(int(setting), args.seq) * args.batch
    factor = 2 if setting == "none" else 8
    return (base + readouts * factor * per_token * read) / base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="tiny, smollm2, or a model folder / Hub id")
    parser.add_argument("--settings", default="sft,none,all,8,16,32,64")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--no-memory", action="store_true", help="skip the per-setting memory processes")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--memory-of", help=argparse.SUPPRESS)  # internal: measure one setting's peak memory
    args = parser.parse_args()
    torch.manual_seed(0)

    if args.memory_of:
        print(json.dumps({"peak_mib": measure_memory(args.memory_of, args)}))
        return

    settings = args.settings.split(",")
    built = {s: build(s, args) for s in settings}
    times: dict[str, list[float]] = {s: [] for s in settings}
    for round_ in range(args.warmup + args.steps):
        for s in settings:
            trainer, batch = built[s]
            sync(args.device)
            start = time.perf_counter()
            train_step(trainer, batch)
            sync(args.device)
            if round_ >= args.warmup:
                times[s].append(time.perf_counter() - start)
        print(
            f"round {round_ + 1}/{args.warmup + args.steps}: "
            + ", ".join(f"{s} {times[s][-1]:.3f}s" for s in settings if times[s]),
            file=sys.stderr,
        )
    config = built[settings[0]][0].model.config
    del built

    memory = {}
    if not args.no_memory:
        for s in settings:
            cmd = [sys.executable, __file__, *sys.argv[1:], "--memory-of", s]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            memory[s] = json.loads(out)["peak_mib"]

    base_time = statistics.median(times["sft"]) if "sft" in times else None
    rows = []
    for s in settings:
        t = statistics.median(times[s])
        rows.append(
            {
                "setting": s,
                "median_step_s": t,
                "time_ratio": t / base_time if base_time else None,
                "peak_mib": memory.get(s),
                "memory_ratio": memory[s] / memory["sft"] if "sft" in memory and s in memory else None,
                "flop_ratio_estimate": flop_estimate(config, args, s),
            }
        )
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU ({os.cpu_count()} cores)"
    result = {
        "model": args.model,
        "device": device,
        "dtype": args.dtype,
        "batch": args.batch,
        "seq": args.seq,
        "steps": args.steps,
        "torch": torch.__version__,
        "rows": rows,
    }
    print(f"\n{args.model} on {device}, {args.dtype}, batch {args.batch}x{args.seq}, median of {args.steps} steps")
    print(f"{'setting':>8} {'step s':>9} {'time x':>7} {'FLOP x':>7} {'peak MiB':>9} {'mem x':>6}")
    for r in rows:
        fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
        print(
            f"{r['setting']:>8} {r['median_step_s']:>9.3f} {fmt(r['time_ratio'], '>7.2f')} "
            f"{r['flop_ratio_estimate']:>7.2f} {fmt(r['peak_mib'], '>9.0f')} {fmt(r['memory_ratio'], '>6.2f')}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
