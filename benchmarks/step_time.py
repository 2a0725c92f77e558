"""
Step time and peak memory of ConstrainedSFTTrainer against plain SFTTrainer on the same model, batch and precision.

    python benchmarks/step_time.py --model tiny
    python benchmarks/step_time.py --model smollm2 --settings sft,all,32 --batch 4 --seq 256
    # GPU rows: Llama 3.1 8B's shape with random weights, bf16 (full fine-tuning needs ~16 B/param; fewer layers fit)
    python benchmarks/step_time.py --model llama-8b-shape --dtype bf16 --batch 4 --seq 512 --lora
    python benchmarks/step_time.py --model llama-8b-shape --dtype bf16 --batch 4 --seq 512 --num-layers 16
    # with training noise on every example (the embedding-noise hook in the step)
    python benchmarks/step_time.py --model smollm2 --settings auto --noise-gamma 0.5 --no-memory

Settings: `sft` (plain SFTTrainer), `none` (constraints off, layers measured on the default sample), `auto` (the
default: a sample sized to 10% of the step's FLOPs), `all` (every token), an integer k (`layer_loss_tokens=k`).
Times are interleaved round-robin in one process, so machine noise hits every setting alike; the median of
`--steps` steps after `--warmup` is reported. Peak memory is `torch.cuda.max_memory_allocated` on GPU and, on CPU,
the peak RSS (VmHWM) of a fresh process per setting (RSS peaks never reset within a process). FLOP estimates count
a training step as 6 x params x tokens plus attention (TRL's estimate; 4 x with LoRA's frozen base) and each extra
readout as 6 x D x V per token (forward 2, backward 4; 4 with a frozen head), or 2 x D x V when only measured.
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
from constrained_sft.trainers import auto_tokens_per_sequence  # noqa: E402

# Llama 3.1 8B's shape, for random-weight GPU rows without downloading the weights (tokens are random ids anyway).
LLAMA_8B = dict(
    hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
    vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
)  # fmt: skip


def load_model(name: str, dtype: torch.dtype, device: str, num_layers: int | None = None, lora: bool = False):
    if name == "tiny":
        model, tokenizer = tiny_causal_lm("llama", num_layers=4, hidden=32, vocab=32), tiny_tokenizer()
    elif name == "llama-8b-shape":
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(**{**LLAMA_8B, "num_hidden_layers": num_layers or LLAMA_8B["num_hidden_layers"]})
        with torch.device(device):
            model = LlamaForCausalLM(config).to(dtype)
        tokenizer = tiny_tokenizer()  # only its pad / eos ids are used; the batch is random ids below the vocab
    else:
        if name == "smollm2":
            from constrained_sft.data.assets import smollm2_path

            name = smollm2_path()
        model, tokenizer = AutoModelForCausalLM.from_pretrained(name, dtype=dtype), AutoTokenizer.from_pretrained(name)
    model = model.to(device=device, dtype=dtype)
    if lora:  # rank-16 adapters on every linear layer of the blocks, base frozen (the LoRA recipes' setting)
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    return model, tokenizer


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
    extra["layer_loss_tokens"] = {"none": "auto", "auto": "auto", "all": None}.get(setting, setting)
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
    model, tokenizer = load_model(args.model, dtype, args.device, args.num_layers, args.lora)
    trainer = make_trainer(setting, args, model, tokenizer)
    trainer.create_optimizer()
    batch = make_batch(args, model.config.vocab_size, args.device)
    if args.noise_gamma and setting != "sft":  # the level the collator would attach to each example
        batch["noise_gamma"] = torch.full((args.batch,), args.noise_gamma, device=args.device)
    return trainer, batch


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


def flop_estimate(config, args, setting: str) -> tuple[float, float]:
    """
    Estimated step FLOPs relative to plain SFT: (lower bound, with the kernel's recomputation). Each token read
    costs 6 x D x V per layer at least (forward 2, backward dx 2 and dW 2; 4 with a frozen head); a kernel that
    recomputes the logits in the backward instead of keeping `[K, V]` probabilities (all GPU kernels, and the CPU
    one above `KEEP_ELEMENTS`) adds another 2 x D x V.
    """
    from constrained_sft.readout.linear_nll import KEEP_ELEMENTS

    tokens = args.batch * args.seq
    base = compute_flops_per_token(config, args.seq) * tokens
    if setting == "sft":
        return 1.0, 1.0
    if args.lora:  # frozen base and head: no weight gradients, backward = 2 x forward
        base *= 4 / 6
    readouts = config.num_hidden_layers - 1
    per_token = (4 if args.lora else 6) * config.hidden_size * config.vocab_size  # per token read and layer
    if setting in ("none", "auto"):  # the trainer's own rule: `readout_budget` 0.1, k tokens per sequence
        k = auto_tokens_per_sequence(
            config, (config.vocab_size, config.hidden_size), readouts, (args.batch, args.seq), args.batch, 0.1
        )
        read = k * args.batch
    else:
        read = tokens if setting == "all" else min(int(setting), args.seq) * args.batch
    if setting == "none":  # measured without grad: forward only, nothing recomputed
        return (base + readouts * per_token / 3 * read) / base, (base + readouts * per_token / 3 * read) / base
    rows = readouts * read  # every layer below the last, stacked into one readout call
    recompute = args.device != "cpu" or rows * config.vocab_size > KEEP_ELEMENTS
    extra = 2 * config.hidden_size * config.vocab_size if recompute else 0
    return (base + rows * per_token) / base, (base + rows * (per_token + extra)) / base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", default="tiny", help="tiny, smollm2, llama-8b-shape (random weights), or a model folder / Hub id"
    )
    parser.add_argument("--num-layers", type=int, help="llama-8b-shape: fewer layers, to fit a smaller device")
    parser.add_argument("--lora", action="store_true", help="train rank-16 LoRA adapters instead of all weights")
    parser.add_argument("--settings", default="sft,none,auto,all,8,16,32,64")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument(
        "--noise-gamma", type=float, default=0.0, help="embedding noise on every example (constrained)"
    )
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
    config = built[settings[0]][0].model.config  # a PEFT model forwards `.config` to its base
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
        flops = flop_estimate(config, args, s)
        rows.append(
            {
                "setting": s,
                "median_step_s": t,
                "time_ratio": t / base_time if base_time else None,
                "peak_mib": memory.get(s),
                "memory_ratio": memory[s] / memory["sft"] if "sft" in memory and s in memory else None,
                "flop_ratio_lower_bound": flops[0],
                "flop_ratio_estimate": flops[1],
            }
        )
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU ({os.cpu_count()} cores)"
    result = {
        "model": args.model + (" + LoRA" if args.lora else ""),
        "num_layers": config.num_hidden_layers,
        "device": device,
        "dtype": args.dtype,
        "batch": args.batch,
        "seq": args.seq,
        "noise_gamma": args.noise_gamma,
        "steps": args.steps,
        "torch": torch.__version__,
        "rows": rows,
    }
    print(f"\n{args.model} on {device}, {args.dtype}, batch {args.batch}x{args.seq}, median of {args.steps} steps")
    print(f"{'setting':>8} {'step s':>9} {'time x':>7} {'FLOP x':>7} {'min FLOP x':>10} {'peak MiB':>9} {'mem x':>6}")
    for r in rows:
        fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
        print(
            f"{r['setting']:>8} {r['median_step_s']:>9.3f} {fmt(r['time_ratio'], '>7.2f')} "
            f"{r['flop_ratio_estimate']:>7.2f} {r['flop_ratio_lower_bound']:>10.2f} {fmt(r['peak_mib'], '>9.0f')} "
            f"{fmt(r['memory_ratio'], '>6.2f')}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
