"""
One process of a study run's training on several devices (`--gpus_per_run` > 1), as `phases.launch_training` starts
it under `accelerate launch`: `python -m constrained_sft.study.launched <job.json>`. It trains the run the file names
(`phases.job_from_spec`) with the processes of the launch; the worker that launched it measures the run afterwards.
"""

from __future__ import annotations

import os
import sys

from ..utils.files import read_json
from .phases import job_from_spec, train


def main(path: str) -> None:
    spec = read_json(path, "the launched job")
    job, wanted = job_from_spec(spec), spec["gpus"]
    if (world := int(os.environ.get("WORLD_SIZE", "1"))) != wanted:  # a launch config that ignored --num_processes
        raise RuntimeError(f"{job.name}: launched as {world} process(es), not the {wanted} it holds devices for.")
    train(job)


if __name__ == "__main__":
    main(sys.argv[1])
