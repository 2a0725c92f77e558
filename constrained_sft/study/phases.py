"""
A study run's phases, in whichever process runs them (`--jobs`): train; measure its robustness on the held-out data;
answer the instructions at the generation levels; for seed 0, decode self-speculatively (`--exit_prompts`: a job of
its own, scheduled after every run's other phases). Each phase is written to the run's record (`record.RunRecord`)
the moment it ends, so a kill loses only the phase in flight and the next call does the run's missing phases; the
weights the study need not keep (`--keep_models`) are deleted once the run's last phase is recorded, never before.
A run whose weights are gone while phases are left trains again and its record starts over (measurements of other
weights are not mixed into one run).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field

from ..data import ModelSpec, delete_weights, has_weights, model_fingerprint
from ..evaluation.alpaca.generate import GenerateArguments
from ..evaluation.alpaca.generate import run as generate
from ..evaluation.exits import ExitsArguments, measure_exits
from ..evaluation.instructions import load_instructions
from ..evaluation.loading import reference_sigma
from ..evaluation.measure import Measurement, measure_model
from ..evaluation.results import ExitsModel, ModelResult
from ..noise import NoiseGrid
from ..tasks import Recipe, get_task, is_finished
from . import clock
from .record import ANSWERS, EXITS, ROBUSTNESS, TRAIN, RunKey, RunRecord, read_record, record_path, write_record

logger = logging.getLogger(__name__)
KEEP_MODELS = ("all", "seed0", "none")


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

    def measurement(self, task, data, data_args, sigma: float | None, source: str | None = None) -> Measurement:
        """The robustness measurement of every run (and of the study's comparison) on `data`."""
        return Measurement(task, data, data_args, NoiseGrid(tuple(self.gammas)), self.curve_gammas, self.train_gamma,
                           self.noise_seeds, 0.0, sigma, source, "trained", self.batch_size, self.max_length,
                           auto_bf16())  # fmt: skip

    def required(self, run: RunKey) -> tuple[str, ...]:
        """The phases `run` goes through: exits for seed 0 only, and only with `exit_prompts`."""
        return (TRAIN, ROBUSTNESS, ANSWERS) + ((EXITS,) if self.exit_prompts and run.seed == 0 else ())


@dataclass(frozen=True)
class Job:
    """Phases of one run, everything a fresh process needs to do them (`run_job`). `restart`: the run's weights are
    gone with phases left, so it trains again from nothing; `estimates`: the plan's seconds per phase, recorded beside
    the measured ones; `jobs`: runs sharing the device; `data_dir`: where runs share their prepared data."""

    study_dir: str
    task: str
    run: RunKey
    recipe: Recipe
    evaluation: Evaluation | None  # None: `--stage train`, the run is trained and nothing else
    phases: tuple[str, ...] = (TRAIN,)
    keep: str = "all"
    restart: bool = False
    data_dir: str | None = None
    estimates: dict[str, float] = field(default_factory=dict, compare=False)
    jobs: int = 1

    @property
    def name(self) -> str:
        return self.run.name if self.phases != (EXITS,) else f"{self.run.name} exits"

    @property
    def folder(self) -> str:
        return self.run.folder(self.study_dir)

    @property
    def last(self) -> bool:
        """Whether this job ends the run (its weights may then go)."""
        required = self.evaluation.required(self.run) if self.evaluation else (TRAIN,)
        return required[-1] in self.phases


def train(job: Job, callbacks=()) -> float:
    """Train the run into its folder unless it is finished (a checkpoint resumes); the seconds it took (0 when it
    was finished already)."""
    if is_finished(job.folder):
        return 0.0
    checkpoints = os.path.isdir(job.folder) and any(f.startswith("checkpoint-") for f in os.listdir(job.folder))
    training = dataclasses.replace(
        job.recipe.training, output_dir=job.folder, seed=job.run.seed, resume_from_checkpoint=True if checkpoints else None
    )  # fmt: skip
    start = time.perf_counter()
    recipe = Recipe(job.recipe.script, job.recipe.model, training)
    get_task(job.task).training.train(recipe, more_runs=True, data_dir=job.data_dir, callbacks=callbacks)
    return time.perf_counter() - start


_DATA: dict[str, object] = {}  # the held-out data, loaded once per process (a worker runs several jobs)


def held_out(job: Job):
    key = repr(job.recipe.script)
    if key not in _DATA:
        _DATA.clear()
        _DATA[key] = get_task(job.task).measuring.evaluation_data(job.recipe.script, job.data_dir)
    return _DATA[key]


def measure(job: Job, sigma: float) -> ModelResult:
    """The run's robustness at every level and noise seed of the study's grid."""
    m = job.evaluation.measurement(get_task(job.task), held_out(job), job.recipe.script, sigma)
    return measure_model(m, job.run.name, job.folder).result


def answer(job: Job, sigma: float) -> dict[str, int]:
    """The run's answers to the instructions at every generation level (`generations/<arm>-seed<s>/`); the empty
    answers per level (under heavy noise an empty answer is a result: judged a loss for the side that gave it)."""
    e = job.evaluation
    stale = os.path.join(job.study_dir, "generations", job.run.stem)
    if os.path.isdir(stale):  # not recorded: a killed phase's partial answers, or answers written where the study was
        shutil.rmtree(stale)
    paths = generate(
        GenerateArguments(
            model=job.folder, name=job.run.stem, output_dir=os.path.join(job.study_dir, "generations"),
            instructions=e.instructions, max_instances=e.max_instances, gammas=e.generation_gammas, sigma_x=sigma,
            batch_size=e.generation_batch_size, max_new_tokens=e.max_new_tokens,
        )
    )  # fmt: skip
    empty = {}
    for gamma, path in paths.items():
        with open(path) as f:
            empty[str(float(gamma))] = sum(not r["output"].strip() for r in json.load(f))
    return empty


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
    args = exits_arguments(job.study_dir, e, [job.folder], [job.run.arm], sigma)
    rows = load_instructions(e.instructions, e.exit_prompts)
    return measure_exits(args, ModelSpec(job.run.arm, job.folder), rows, sigma, auto_bf16())[0]


def auto_bf16() -> bool:
    """bf16 weights where the device has them, as the evaluation commands default (fp32 on CPU)."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def start_over(job: Job) -> None:
    """The run's folder and record removed: its weights are gone with phases left (see the module docstring)."""
    logger.warning("%s: its weights are gone with phases left; it trains again and its record starts over.", job.name)
    if os.path.isdir(job.folder):
        shutil.rmtree(job.folder)
    if os.path.isfile(record_path(job.study_dir, job.run)):
        os.remove(record_path(job.study_dir, job.run))


def run_job(job: Job) -> dict:
    """The job's phases in order, each written to the run's record as it ends; returns the record as written. Runs
    in the study's process or in a worker of `--jobs`."""
    key = get_task(job.task).headline.key
    if job.restart:
        start_over(job)
    record = read_record(job.study_dir, job.run, key) or RunRecord(job.run.name)

    def done(phase: str, started: float) -> None:
        record.seconds[phase], record.jobs[phase] = round(clock.now() - started, 2), job.jobs
        if phase in job.estimates:
            record.estimates[phase] = round(job.estimates[phase], 2)
        write_record(job.study_dir, record, key)

    if TRAIN in job.phases:
        started = clock.now()
        if train(job) == 0.0:  # finished before it was recorded: nothing measured, nothing to learn an estimate from
            started = clock.now()
        done(TRAIN, started)
    if job.evaluation is None:
        return record.to_dict(key)
    e = job.evaluation
    sigma = e.sigma_x if e.sigma_x is not None else reference_sigma(None, job.folder)[0]
    record.sigma_x, record.model = sigma, model_fingerprint(job.folder)
    phases = {
        ROBUSTNESS: lambda: measure(job, sigma),
        ANSWERS: lambda: answer(job, sigma),
        EXITS: lambda: decode(job, sigma),
    }
    kept = {ROBUSTNESS: "robustness", ANSWERS: "empty_answers", EXITS: "exits"}
    for phase in (p for p in (ROBUSTNESS, ANSWERS, EXITS) if p in job.phases):
        started = clock.now()
        setattr(record, kept[phase], phases[phase]())
        done(phase, started)
    if job.last and (job.keep == "none" or (job.keep == "seed0" and job.run.seed != 0)) and has_weights(job.folder):
        delete_weights(job.folder)  # after the last record: a kill in between keeps the weights, never loses the run
    return record.to_dict(key)
