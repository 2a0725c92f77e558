"""
Kill -9 at random moments, resume, repeat: how often a constrained run can be killed and still finish exactly like
the run that never was. Each trial SIGKILLs an attempt at a uniformly random moment of its training (after the
imports), restarts it with `resume_from_checkpoint=True`, and repeats until an attempt finishes; the finished
weights, multipliers and dual-optimizer state are compared with an uninterrupted run's.

    python benchmarks/crash_resume.py --task sft --trials 10 --seed 0

Uses tests/scripts/crash_resume.py (tiny model, every random stream on, a checkpoint every 2 of 12 steps, a noisy
evaluation every 4). Writes benchmarks/results/crash_resume-<task>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "scripts", "crash_resume.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
from crash_resume import finished, largest_difference  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}


def attempt(task: str, out: str, kill_after: float | None, started: str) -> tuple[int, str, float | None]:
    """(exit code, stderr, seconds into training at the kill or None)."""
    if os.path.exists(started):
        os.remove(started)
    cmd = [sys.executable, SCRIPT, task, out, "none"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**ENV, "CRASH_STARTED": started}
    )
    while not os.path.exists(started) and proc.poll() is None:
        time.sleep(0.01)
    killed = None
    if kill_after is not None:
        time.sleep(kill_after)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed = kill_after
    _, stderr = proc.communicate()
    return proc.returncode, stderr, killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=["sft", "classifier"], default="sft")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", type=float, default=1.5, help="kill within this many seconds of training")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="crash-resume-")
    started = os.path.join(work, "started")
    reference = os.path.join(work, "reference")
    code, stderr, _ = attempt(args.task, reference, None, started)
    assert code == 0, stderr[-2000:]
    trials = []
    for t in range(args.trials):
        out = os.path.join(work, f"trial{t}")
        kills, skipped = [], 0
        while True:
            code, stderr, killed = attempt(args.task, out, rng.uniform(0.0, args.window), started)
            skipped += stderr.count("Skipped ")
            if code == 0:
                break
            if code != -signal.SIGKILL:
                raise SystemExit(f"trial {t}: an attempt failed with exit code {code}:\n{stderr[-3000:]}")
            kills.append(round(killed, 3))
        trials.append(
            {
                "kills_at_s": kills,
                "skipped_checkpoints": skipped,
                "difference": largest_difference(finished(out), finished(reference)),
            }
        )
        print(json.dumps({"trial": t, **trials[-1]}), flush=True)
    summary = {
        "task": args.task,
        "trials": args.trials,
        "kills": sum(len(t["kills_at_s"]) for t in trials),
        "half_written_checkpoints_skipped": sum(t["skipped_checkpoints"] for t in trials),
        "largest_difference": max(t["difference"] for t in trials),
        "per_trial": trials,
    }
    os.makedirs(os.path.join(ROOT, "benchmarks", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "benchmarks", "results", f"crash_resume-{args.task}.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps({k: v for k, v in summary.items() if k != "per_trial"}))


if __name__ == "__main__":
    main()
