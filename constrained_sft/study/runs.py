"""
One study run (an arm at a training seed) from training to the results the study keeps of it, in whichever process
runs it (`--jobs`): train; measure its robustness on the held-out data; answer the instructions at the generation
levels; for seed 0, decode self-speculatively (`--exit_prompts`); write the run's record; delete the weights the study
need not keep (`--keep_models`). A study continues and reports from the records alone, so a folder whose weights
are gone still resumes, and a kill loses only the runs in flight (a record is written whole or not at all).

    runs/<arm>-seed<s>.json   {"run", "seconds": {train, robustness, generation, exits, total}, "sigma_x",
                               "model", "robustness": ModelResult, "exits": ExitsModel | null}
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any

from ..data import ModelSpec, delete_weights, model_fingerprint
from ..evaluation.alpaca.generate import GenerateArguments
from ..evaluation.alpaca.generate import run as generate
from ..evaluation.exits import ExitsArguments, measure_exits
from ..evaluation.instructions import load_instructions
from ..evaluation.loading import reference_sigma
from ..evaluation.measure import Measurement, measure_model
from ..evaluation.results import ExitsModel, ModelResult
from ..noise import NoiseGrid
from ..tasks import Recipe, get_task, is_finished
from ..utils.files import read_json, write_json
from ..utils.folders import child_path

KEEP_MODELS = ("all", "seed0", "none")
RUNS = "runs"


def run_dir(study_dir: str, arm: str, seed: int) -> str:
    return child_path(study_dir, "train", arm, f"seed{seed}")


def record_path(study_dir: str, arm: str, seed: int) -> str:
    return child_path(study_dir, RUNS, f"{arm}-seed{seed}.json")


@dataclass(frozen=True)
class Evaluation:
    """What every run is measured with after it trains (fixed for the study): the robustness grid and its noise
    seeds, the instructions and how they are answered, the exit-layer decoding of seed 0 (`exit_prompts` 0: none).
    `sigma_x`: None takes each run's recorded scale (every run records its starting model's, the same base model;
    `finish` checks they agree)."""

    gammas: list[float]
    curve_gammas: list[float]
    train_gamma: float
    noise_seeds: int
    batch_size: int
    max_length: int
    instructions: str
    max_instances: int | None
    generation_gammas: list[float]
    generation_batch_size: int
    max_new_tokens: int
    exit_prompts: int
    exit_layers: list[int] | None
    exit_new_tokens: int
    bootstrap_samples: int
    sigma_x: float | None = None


@dataclass(frozen=True)
class Job:
    """One run of the study, everything a fresh process needs to do it (`run_job`)."""

    study_dir: str
    task: str
    arm: str
    seed: int
    recipe: Recipe
    evaluation: Evaluation | None  # None: `--stage train`, the run is trained and nothing else
    keep: str = "all"

    @property
    def name(self) -> str:
        return f"{self.arm}/seed{self.seed}"

    @property
    def folder(self) -> str:
        return run_dir(self.study_dir, self.arm, self.seed)


@dataclass
class RunRecord:
    """What the study keeps of a run: its measurements and the seconds each step took."""

    run: str
    sigma_x: float | None
    model: str  # the weights' fingerprint when they were measured
    robustness: ModelResult
    exits: ExitsModel | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self, key: str) -> dict[str, Any]:
        return {"run": self.run, "sigma_x": self.sigma_x, "model": self.model,
                "robustness": self.robustness.to_dict(key), "exits": None if self.exits is None else self.exits.to_dict(),
                "seconds": self.seconds}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any], key: str) -> RunRecord:
        exits = data.get("exits")
        return cls(data["run"], data["sigma_x"], data["model"], ModelResult.from_dict(data["robustness"], key),
                   None if exits is None else ExitsModel.from_dict(exits), data.get("seconds", {}))  # fmt: skip


def read_record(study_dir: str, arm: str, seed: int, key: str) -> RunRecord | None:
    """The run's record, None when it has none yet (not finished, or finished before records)."""
    path = record_path(study_dir, arm, seed)
    return RunRecord.from_dict(read_json(path, "--study_dir"), key) if os.path.isfile(path) else None


def train(job: Job) -> float:
    """Train the run into its folder unless it is finished (a checkpoint resumes); the seconds it took."""
    if is_finished(job.folder):
        return 0.0
    checkpoints = os.path.isdir(job.folder) and any(f.startswith("checkpoint-") for f in os.listdir(job.folder))
    training = dataclasses.replace(
        job.recipe.training, output_dir=job.folder, seed=job.seed, resume_from_checkpoint=True if checkpoints else None
    )
    start = time.perf_counter()
    get_task(job.task).training.train(Recipe(job.recipe.script, job.recipe.model, training), more_runs=True)
    return time.perf_counter() - start


_DATA: dict[str, Any] = {}  # the held-out data, loaded once per process (a worker runs several jobs)


def measure(job: Job, sigma: float) -> ModelResult:
    """The run's robustness at every level and noise seed of the study's grid."""
    task, e = get_task(job.task), job.evaluation
    key = repr(job.recipe.script)
    if key not in _DATA:
        _DATA.clear()
        _DATA[key] = task.measuring.evaluation_data(job.recipe.script)
    m = Measurement(task, _DATA[key], job.recipe.script, NoiseGrid(tuple(e.gammas)), e.curve_gammas, e.train_gamma,
                    e.noise_seeds, 0.0, sigma, None, "trained", e.batch_size, e.max_length, auto_bf16())  # fmt: skip
    return measure_model(m, job.name, job.folder).result


def answer(job: Job, sigma: float) -> None:
    """The run's answers to the instructions at every generation level (`generations/<arm>-seed<s>/`)."""
    e = job.evaluation
    generate(
        GenerateArguments(
            model=job.folder,
            name=f"{job.arm}-seed{job.seed}",
            output_dir=os.path.join(job.study_dir, "generations"),
            instructions=e.instructions,
            max_instances=e.max_instances,
            gammas=e.generation_gammas,
            sigma_x=sigma,
            batch_size=e.generation_batch_size,
            max_new_tokens=e.max_new_tokens,
        )  # fmt: skip
    )


def exits_arguments(study_dir: str, e: Evaluation, models: list[str], names: list[str], sigma: float | None):
    """The study's `eval exits` settings: each arm's seed-0 model on the first `exit_prompts` instructions."""
    return ExitsArguments(
        models=models, names=names, output_dir=os.path.join(study_dir, "exits"), exit_layers=e.exit_layers,
        instructions=e.instructions, max_instances=e.exit_prompts, max_new_tokens=e.exit_new_tokens,
        gammas=sorted(set(e.generation_gammas)), sigma_x=sigma, bootstrap_samples=e.bootstrap_samples,
    )  # fmt: skip


def decode(job: Job, sigma: float) -> ExitsModel:
    """Seed 0's self-speculative decoding per exit layer and each layer's readout of the reference answers."""
    e = job.evaluation
    args = exits_arguments(job.study_dir, e, [job.folder], [job.arm], sigma)
    rows = load_instructions(e.instructions, e.exit_prompts)
    return measure_exits(args, ModelSpec(job.arm, job.folder), rows, sigma, auto_bf16())[0]


def auto_bf16() -> bool:
    """bf16 weights where the device has them, as the evaluation commands default (fp32 on CPU)."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def run_job(job: Job) -> dict[str, Any]:
    """The run from training to its record (see the module docstring); returns the record as written (with
    `--stage train`: only the training seconds). Runs in the study's process or in a worker of `--jobs`."""
    start = time.perf_counter()
    seconds = {"train": round(train(job), 1)}
    if job.evaluation is None:
        return {"run": job.name, "seconds": seconds}
    e = job.evaluation
    sigma = e.sigma_x if e.sigma_x is not None else reference_sigma(None, job.folder)[0]
    steps = {"robustness": lambda: measure(job, sigma), "generation": lambda: answer(job, sigma)}
    if e.exit_prompts and job.seed == 0:
        steps["exits"] = lambda: decode(job, sigma)
    done = {}
    for name, step in steps.items():
        t = time.perf_counter()
        done[name] = step()
        seconds[name] = round(time.perf_counter() - t, 1)
    seconds["total"] = round(time.perf_counter() - start, 1)
    headline = get_task(job.task).headline.key
    record = RunRecord(job.name, sigma, model_fingerprint(job.folder), done["robustness"], done.get("exits"), seconds)
    os.makedirs(child_path(job.study_dir, RUNS), exist_ok=True)
    write_json(record_path(job.study_dir, job.arm, job.seed), record.to_dict(headline))
    if job.keep == "none" or (job.keep == "seed0" and job.seed != 0):
        delete_weights(job.folder)  # after the record: a kill in between keeps the weights, never loses the run
    return record.to_dict(headline)
