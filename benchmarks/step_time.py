"""
Step time and peak memory of ConstrainedSFTTrainer against plain SFTTrainer on the same model, batch and precision.

    python benchmarks/step_time.py --model tiny
    python benchmarks/step_time.py --model smollm2 --settings sft,all,32 --batch 4 --seq 256
    # GPU rows: Llama 3.1 8B's shape with random weights, bf16 (full fine-tuning needs ~16 B/param; fewer layers fit)
    python benchmarks/step_time.py --model llama-8b-shape --dtype bf16 --batch 4 --seq 512 --lora
    python benchmarks/step_time.py --model llama-8b-shape --dtype bf16 --batch 4 --seq 512 --num-layers 16
    # with training noise on every example (the embedding-noise hook in the step)
    python benchmarks/step_time.py --model smollm2 --settings auto --noise-gamma 0.5 --no-memory

Settings: `sft` (plain SFTTrainer), `none` (constraints off, layers measured on the default sample: the ERM arm),
`auto` (the default: a sample sized to 10% of the step's FLOPs), `all` (every token), an integer k
(`layer_loss_tokens=k`).

Protocol. Times come from `--repeats` fresh processes; each builds the model once and runs every setting on it
round-robin, step by step (one trainer per setting over the same model and one shared optimizer, so a single
model and optimizer state are alive however many settings run), so machine noise hits every setting alike. A
setting's time ratio is the median over steps of its step time over plain SFT's in the same round; the processes'
ratios are summarised as their median and a 95% t-interval of their mean. With `--baseline-code`, processes
alternate between this checkout and the other one, each with its own plain-SFT reference: before / after in one
run. Peak memory comes from one more fresh process per setting, run after the timing processes have exited (the
parent imports no model and never touches the GPU): `torch.cuda.max_memory_allocated` on GPU and, on CPU, the peak
RSS (VmHWM) of the training steps, reset after the model is built (`/proc/self/clear_refs`), both including the
weights; on CPU with the system allocator, whose RSS follows what the step holds (under `host_allocator='reuse'`,
the timing processes' default, freed blocks stay in the heap and the peak RSS depends on how it fragments). With
`--noise-gamma`, each setting gets its own model (the noise hooks of several trainers would stack on one embedding).

FLOPs: see `step_flops.py` ("FLOP x" and "TFLOP/s" in the rows).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if os.environ.get("STEP_TIME_CODE"):  # a `--baseline-code` child: that checkout's package, not the installed one
    sys.path.insert(0, os.environ["STEP_TIME_CODE"])

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from host_memory import peak_rss_mib, reset_peak_rss  # noqa: E402
from intervals import t_interval  # noqa: E402
from provenance import source_commit  # noqa: E402
from step_flops import flop_estimate, sft_flops  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

import constrained_sft  # noqa: E402
from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer  # noqa: E402
from constrained_sft.testing import tiny_causal_lm, tiny_tokenizer  # noqa: E402

try:
    from constrained_sft.trainers.host_allocator import reuse_freed_host_memory  # noqa: E402
except ImportError:  # a `--baseline-code` checkout from before `host_allocator`: the allocator its users had
    reuse_freed_host_memory = None

# Llama 3.1 8B's shape, for random-weight GPU rows without downloading the weights (tokens are random ids anyway).
LLAMA_8B = dict(
    hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
    vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
)  # fmt: skip
# SmolLM2-135M-Instruct's shape (its config.json), for random-weight rows on machines without the offline assets
SMOLLM2_135M = dict(
    hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
    vocab_size=49152, max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
)  # fmt: skip
SHAPES = {"llama-8b-shape": LLAMA_8B, "smollm2-shape": SMOLLM2_135M}


def load_model(name: str, dtype: torch.dtype, device: str, num_layers: int | None = None, lora: bool = False):
    if name == "tiny":
        model, tokenizer = tiny_causal_lm("llama", num_layers=4, hidden=32, vocab=32), tiny_tokenizer()
    elif name in SHAPES:
        from transformers import LlamaConfig, LlamaForCausalLM

        shape = SHAPES[name]
        config = LlamaConfig(**{**shape, "num_hidden_layers": num_layers or shape["num_hidden_layers"]})
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
    if "host_allocator" in {f.name for f in dataclasses.fields(ConstrainedSFTConfig)}:  # a baseline checkout's field
        extra["host_allocator"] = args.host_allocator
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
        trainer.dual_step()
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def build(settings: list[str], args: argparse.Namespace) -> dict[str, tuple]:
    """{setting: (trainer, batch)} over one model and one optimizer (a model per setting with `--noise-gamma`)."""
    dtype = torch.bfloat16 if args.dtype == "bf16" and args.device != "cpu" else torch.float32
    built, shared = {}, None
    for setting in settings:
        if shared is None or args.noise_gamma:
            shared = load_model(args.model, dtype, args.device, args.num_layers, args.lora)
            optimizer = None
        trainer = make_trainer(setting, args, *shared)
        if optimizer is None:
            trainer.create_optimizer()
            optimizer = trainer.optimizer
        trainer.optimizer = optimizer
        batch = make_batch(args, shared[0].config.vocab_size, args.device)
        if args.noise_gamma and setting != "sft":  # the level the collator would attach to each example
            batch["noise_gamma"] = torch.full((args.batch,), args.noise_gamma, device=args.device)
        built[setting] = (trainer, batch)
    return built


def time_settings(settings: list[str], args: argparse.Namespace) -> dict:
    """Every setting round-robin, step by step, in this (fresh) process: {setting: [step seconds]} and facts."""
    built = build(settings, args)
    times: dict[str, list[float]] = {s: [] for s in settings}
    for step in range(args.warmup + args.steps):
        for setting in settings:
            trainer, batch = built[setting]
            sync(args.device)
            start = time.perf_counter()
            train_step(trainer, batch)
            sync(args.device)
            if step >= args.warmup:
                times[setting].append(time.perf_counter() - start)
    config = built[settings[0]][0].model.config  # a PEFT model forwards `.config` to its base
    cuda = args.device.startswith("cuda")
    return {
        "step_s": times,
        "flop_ratio": {s: flop_estimate(config, args, s) for s in settings},
        "sft_flops": sft_flops(config, args),
        "num_layers": config.num_hidden_layers,
        "device": torch.cuda.get_device_name() if cuda else f"CPU ({os.cpu_count()} cores)",
        "code": os.path.dirname(os.path.dirname(os.path.abspath(constrained_sft.__file__))),
        "commit": source_commit(os.path.dirname(os.path.abspath(constrained_sft.__file__))),
        "version": constrained_sft.__version__,
    }


def measure_memory(setting: str, args: argparse.Namespace) -> float:
    """Peak memory in MiB of `--warmup + 2` steps of one setting, in this (fresh) process, weights included."""
    trainer, batch = build([setting], args)[setting]
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    else:
        reset_peak_rss()
    for _ in range(args.warmup + 2):
        train_step(trainer, batch)
    sync(args.device)
    return torch.cuda.max_memory_allocated() / 2**20 if args.device.startswith("cuda") else peak_rss_mib()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model",
        default="tiny",
        help="tiny, smollm2, llama-8b-shape or smollm2-shape (random weights), or a model folder / Hub id",
    )
    parser.add_argument(
        "--num-layers", type=int, help="llama-8b-shape / smollm2-shape: fewer layers, to fit a smaller device"
    )
    parser.add_argument("--lora", action="store_true", help="train rank-16 LoRA adapters instead of all weights")
    parser.add_argument("--settings", default="sft,none,auto,all,8,16,32,64")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5, help="timed steps of every setting in each process")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="timing processes (per code version)")
    parser.add_argument("--device", default=None, help="cuda if available, else cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument(
        "--noise-gamma", type=float, default=0.0, help="embedding noise on every example (constrained)"
    )
    parser.add_argument(
        "--baseline-code",
        help="another checkout of this repository (e.g. a `git worktree` of an older commit): every setting but `sft` "
        "also runs on that code, as `<setting>@base`, interleaved with the rest (before / after in one run)",
    )
    parser.add_argument(
        "--host-allocator",
        choices=["reuse", "system"],
        default="reuse",
        help="CPU: the trainers' `host_allocator` (default 'reuse', the command's default); applied to every timing "
        "process, so plain SFT gets the same allocator as the constrained settings (peak memory is measured with the "
        "system allocator, whose peak RSS is what the step holds)",
    )
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--no-memory", action="store_true", help="skip the per-setting memory processes")
    parser.add_argument("--timing", action="store_true", help=argparse.SUPPRESS)  # internal: one timing process
    parser.add_argument("--memory-of", help=argparse.SUPPRESS)  # internal: one setting's peak memory
    args = parser.parse_args(argv)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return args


def summarise(args: argparse.Namespace, runs: list[dict], memory: dict[str, float]) -> dict:
    """Per setting (and per code version): median step time, time ratio over plain SFT of the same process (median
    of paired steps; over processes: median and 95% interval), peak memory, FLOP estimate, achieved TFLOP/s."""
    rows = []
    for code in dict.fromkeys(run["code"] for run in runs):  # this checkout first, then a baseline
        mine = [run for run in runs if run["code"] == code]
        label = "" if code == runs[0]["code"] else "@base"
        for s in mine[0]["step_s"]:
            ratios = [
                statistics.median(t / b for t, b in zip(run["step_s"][s], run["step_s"]["sft"], strict=True))
                for run in mine
            ]
            median = statistics.median(t for run in mine for t in run["step_s"][s])
            lower, estimate = mine[0]["flop_ratio"][s]
            row = {
                "setting": s + label,
                "code": code,
                "commit": mine[0].get("commit"),
                "version": mine[0].get("version"),
            }
            row["median_step_s"] = median
            row["flop_ratio_estimate"] = estimate
            row["flop_ratio_lower_bound"] = lower
            row["tflops"] = mine[0]["sft_flops"] * estimate / median / 1e12
            row.update(time_ratio=statistics.median(ratios), time_ratio_ci95=t_interval(ratios), process_ratios=ratios)
            row["peak_mib"] = memory.get(s) if not label else None
            row["memory_ratio"] = memory[s] / memory["sft"] if s in memory and "sft" in memory and not label else None
            rows.append(row)
    first = runs[0]
    keys = ("batch", "seq", "dtype", "noise_gamma", "steps", "warmup", "repeats", "host_allocator")
    return {
        "model": args.model + (" + LoRA" if args.lora else ""),
        "num_layers": first["num_layers"],
        "device": first["device"],
        **{k: getattr(args, k) for k in keys},
        "torch": torch.__version__,
        "rows": rows,
    }


def child(args: argparse.Namespace, flag: list[str], code: str | None = None) -> dict:
    """This script in a fresh process (`code`: with another checkout's package); its last stdout line as JSON."""
    cmd = [sys.executable, __file__, *sys.argv[1:], "--device", args.device, *flag]
    env = {**os.environ, "STEP_TIME_CODE": os.path.abspath(code)} if code else None
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"{' '.join(flag)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    args = parse_args()
    torch.manual_seed(0)
    settings = args.settings.split(",")
    if "sft" not in settings:
        sys.exit("--settings must include sft: every ratio is over plain SFTTrainer's step in the same process")
    if args.memory_of:  # what the step holds: under 'reuse' the peak RSS would count the blocks the heap keeps
        args.host_allocator = "system"
        print(json.dumps({"peak_mib": measure_memory(args.memory_of, args)}))
        return
    if args.device == "cpu" and args.host_allocator == "reuse" and reuse_freed_host_memory and args.timing:
        reuse_freed_host_memory()  # before the first model, in every timing process
    if args.timing:
        print(json.dumps(time_settings(settings, args)))
        return
    codes = [None, args.baseline_code] if args.baseline_code else [None]
    runs = []
    for repeat in range(args.repeats):
        for code in codes[repeat % len(codes) :] + codes[: repeat % len(codes)]:  # alternate which goes first
            runs.append(child(args, ["--timing"], code))
            medians = {s: statistics.median(t) for s, t in runs[-1]["step_s"].items()}
            print(f"process {len(runs)} ({code or 'this checkout'}): {medians}", file=sys.stderr)
    memory = {} if args.no_memory else {s: child(args, ["--memory-of", s])["peak_mib"] for s in settings}
    result = summarise(args, runs, memory)
    print(
        f"\n{args.model} on {result['device']}, {args.dtype}, batch {args.batch}x{args.seq}: {args.steps} steps per "
        f"setting in each of {args.repeats} processes, settings interleaved step by step"
    )
    print(
        f"{'setting':>10} {'step s':>9} {'time x':>7} {'95% interval':>15} {'FLOP x':>7} {'min':>5} "
        f"{'TFLOP/s':>8} {'peak MiB':>9} {'mem x':>6}"
    )
    for r in result["rows"]:
        fmt = lambda v, spec: format(v, spec) if v is not None else "-".rjust(int(spec[1:].split(".")[0]))  # noqa: E731
        ci = r["time_ratio_ci95"]
        print(
            f"{r['setting']:>10} {r['median_step_s']:>9.4f} {r['time_ratio']:>7.3f} {f'[{ci[0]:.3f}, {ci[1]:.3f}]':>15} "
            f"{r['flop_ratio_estimate']:>7.3f} {r['flop_ratio_lower_bound']:>5.2f} {r['tflops']:>8.3f} "
            f"{fmt(r['peak_mib'], '>9.0f')} {fmt(r['memory_ratio'], '>6.3f')}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
