"""
Soak: a long constrained run on 2 CPU processes, watched for growth. Every optimizer step records each rank's
resident memory (RSS), the Python object count, and the sizes of what the trainer keeps between steps: the
feasibility history (a window, bounded), the micro-batch statistics (emptied at every dual step), the logging
buffers (emptied at every log), the probe (no request active, no forward hook left on the backbone) and TRL's metric
lists. After step `--after` (warm-up: allocator pools, the first evaluation) RSS should be flat.

    python benchmarks/soak.py --steps 300 --eval_steps 50

launches itself with `accelerate launch --multi_gpu --num_processes 2` (gloo, `use_cpu`), trains the tiny Llama
with token sampling, a training noise range and noisy evaluation every `--eval_steps` steps, and prints per rank the
RSS slope after `--after` (least squares, MB per 100 steps) and every buffer's largest size after it. RSS is read
every `--every` steps after `gc.collect()` and glibc's `malloc_trim(0)`, so it counts live memory rather than freed
pages the allocator keeps. `--constraints none` runs the same soak as ERM, the baseline to compare with. Writes
benchmarks/results/soak-<constraints>.json.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import tempfile
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")


def sizes(trainer) -> dict[str, int]:
    """What the trainer holds between steps, as counts."""
    from constrained_sft.readout.probe import _ForwardHook

    base = trainer.model.module if hasattr(trainer.model, "module") else trainer.model
    hook = _ForwardHook.of(base)
    trl_metrics = getattr(trainer, "_metrics", {})
    return {
        "feasibility_history": len(trainer.primal_dual.history),
        "train_stats_rows": 0 if trainer.primal_dual.train_stats.totals is None else 1,
        "eval_stats_rows": 0 if trainer.setup.eval_stats.totals is None else 1,
        "log_buffer": sum(len(v) for v in trainer.setup.train_metrics.values()),
        "noise_draw_counters": len(trainer.noise.draws),
        "probe_active_requests": 0 if hook is None or hook.active is None else 1,
        "backbone_forward_hooks": len(base.base_model._forward_hooks),
        "trl_metric_values": sum(len(v) for mode in trl_metrics.values() for v in mode.values()),
        "python_objects": len(gc.get_objects()),
        # grows by design: transformers keeps every log row for trainer_state.json
        "log_history_rows": len(trainer.state.log_history),
        "log_history_kb": len(json.dumps(trainer.state.log_history)) / 1024,
    }


def rank_main(args: argparse.Namespace) -> None:
    warnings.filterwarnings("ignore")
    import psutil
    from transformers import TrainerCallback

    from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
    from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

    config = ConstrainedSFTConfig(
        output_dir=args.output_dir, report_to="none", use_cpu=True, bf16=False, disable_tqdm=True, seed=0,
        max_steps=args.steps, per_device_train_batch_size=4, per_device_eval_batch_size=8, learning_rate=3e-3,
        logging_steps=10, save_strategy="no", eval_strategy="steps", eval_steps=args.eval_steps,
        eval_noise_gammas=[0.5, 1.0], noise_gamma=[0.0, 1.0], noise_clean_prob=0.3, layer_loss_tokens=3,
        dual_optimizer="adam", dual_lr=0.05, resilience=0.1, descent_alpha=0.05, constraints=args.constraints,
    )  # fmt: skip
    trainer = ConstrainedSFTTrainer(
        model=tiny_causal_lm("llama"),
        args=config,
        train_dataset=successor_dataset(512),
        eval_dataset=successor_dataset(64, seed=1),
        processing_class=tiny_tokenizer(),
    )
    process = psutil.Process()
    rows = []
    try:  # hand freed heap pages back first, so RSS measures live memory rather than the allocator's slack
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except OSError:
        trim = None

    class Watch(TrainerCallback):
        def on_step_end(self, a, state, control, **kwargs):
            if state.global_step % args.every:
                return
            gc.collect()
            if trim is not None:
                trim(0)
            rows.append({"step": state.global_step, "rss_mb": process.memory_info().rss / 2**20, **sizes(trainer)})

    trainer.add_callback(Watch())
    trainer.train()
    with open(os.path.join(args.output_dir, f"soak.rank{config.process_index}.json"), "w") as f:
        json.dump(rows, f)
    trainer.accelerator.wait_for_everyone()
    trainer.end()


def slope(rows: list[dict], key: str) -> float:
    """Least-squares slope of `key` against the step, per 100 steps."""
    import numpy as np

    steps = np.array([r["step"] for r in rows], dtype=float)
    values = np.array([r[key] for r in rows], dtype=float)
    return float(np.polyfit(steps, values, 1)[0] * 100)


def summarise(rows: list[dict], after: int) -> dict:
    late = [r for r in rows if r["step"] > after]
    buffers = [
        k for k in rows[0] if k not in ("step", "rss_mb", "python_objects", "log_history_rows", "log_history_kb")
    ]
    return {
        "steps": rows[-1]["step"],
        "rss_mb_at_after": late[0]["rss_mb"],
        "rss_mb_at_end": late[-1]["rss_mb"],
        "rss_slope_mb_per_100_steps": slope(late, "rss_mb"),
        "python_objects_slope_per_100_steps": slope(late, "python_objects"),
        "python_objects_at_after_and_end": [late[0]["python_objects"], late[-1]["python_objects"]],
        "log_history_rows_at_after_and_end": [late[0]["log_history_rows"], late[-1]["log_history_rows"]],
        "log_history_kb_slope_per_100_steps": slope(late, "log_history_kb"),
        "largest_after": {k: max(r[k] for r in late) for k in buffers},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--eval_steps", type=int, default=50)
    parser.add_argument("--after", type=int, default=50)
    parser.add_argument("--every", type=int, default=5, help="sample every this many steps (gc + malloc_trim)")
    parser.add_argument(
        "--constraints", choices=["descent", "none"], default="descent", help="'none': ERM, to compare"
    )
    parser.add_argument("--output_dir", default=None)
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        return rank_main(args)
    args.output_dir = args.output_dir or tempfile.mkdtemp(prefix="soak-")
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines",
        "1", "--mixed_precision", "no", "--dynamo_backend", "no", __file__, "--rank", "--steps", str(args.steps),
        "--eval_steps", str(args.eval_steps), "--output_dir", args.output_dir, "--every", str(args.every),
        "--constraints", args.constraints,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    subprocess.run(cmd, check=True, env=env)
    result = {"settings": vars(args), "ranks": []}
    for rank in (0, 1):
        with open(os.path.join(args.output_dir, f"soak.rank{rank}.json")) as f:
            rows = json.load(f)
        result["ranks"].append({"rank": rank, **summarise(rows, args.after), "series": rows})
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"soak-{args.constraints}.json"), "w") as f:
        json.dump(result, f)
    for r in result["ranks"]:
        print(json.dumps({k: v for k, v in r.items() if k != "series"}))


if __name__ == "__main__":
    main()
