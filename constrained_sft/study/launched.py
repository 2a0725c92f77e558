"""
A study run on several devices (`--gpus_per_run` > 1): its training under `accelerate launch` with the study's launch
config (`--accelerate_config`; FSDP2 for an 8B model's full fine-tuning), one process per device the run holds, while
the worker that launched it waits and then measures the run in one process (robustness, answers and exits need no
launch). The job crosses to the launched processes as a pickle beside the run's folder (`python -m
constrained_sft.study.launched <file>`), removed once they end.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
from typing import TYPE_CHECKING

from ..utils.files import atomic_path

if TYPE_CHECKING:
    from .phases import Job


def launch_training(job: Job) -> None:
    """Train `job.recipe` (its `output_dir` the run's folder) on `job.gpus` processes; a failed launch raises with
    its last output lines."""
    path = job.folder.rstrip("/") + ".launch.pkl"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        pickle.dump(job, f)
    how = ["--config_file", job.launch_config] if job.launch_config else ["--multi_gpu"]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *how, "--num_processes", str(job.gpus),
           "--num_machines", "1", "-m", "constrained_sft.study.launched", path]  # fmt: skip
    config = job.launch_config or "accelerate's --multi_gpu"
    print(f"{job.name}: training on {job.gpus} processes (accelerate launch --config_file {config})", flush=True)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    finally:
        os.remove(path)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"{job.name}: the launch of its training on {job.gpus} devices failed:\n{tail}")


def main(path: str) -> None:
    """One launched process: the run's training (`phases.train`) with the job as the launching worker pickled it."""
    from .phases import train

    with open(path, "rb") as f:
        job = pickle.load(f)
    if (world := int(os.environ.get("WORLD_SIZE", "1"))) != job.gpus:  # a launch config that ignored --num_processes
        raise RuntimeError(f"{job.name}: launched as {world} process(es), not the {job.gpus} it holds devices for.")
    train(dataclasses.replace(job, gpus=1))


if __name__ == "__main__":
    main(sys.argv[1])
