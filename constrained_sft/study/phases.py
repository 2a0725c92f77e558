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
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeGuard, get_args

from ..comparison import RunKey
from ..config import ConstrainedSFTConfig
from ..data import delete_weights, has_weights, model_fingerprint
from ..tasks import AnyRecipe, Recipe, SharedDataTraining, get_task, is_finished
from ..utils.files import json_safe, write_json
from ..utils.types import JSONObject, JSONRead
from . import clock
from .after_training import Evaluation
from .record import ANSWERS, EXITS, ROBUSTNESS, TRAIN, RunRecord, read_run_record, write_run_record
from .study_folder import StudyFolder

if TYPE_CHECKING:
    from transformers import TrainerCallback

logger = logging.getLogger(__name__)
KeepModels: TypeAlias = Literal["all", "seed0", "none"]  # `--keep_models`
KEEP_MODELS: tuple[KeepModels, ...] = get_args(KeepModels)


def required(evaluation: Evaluation | None, run: RunKey) -> tuple[str, ...]:
    """The phases `run` goes through: training alone under `--stage train` (no `evaluation`); exits for seed 0 only,
    and only with `exit_prompts`."""
    if evaluation is None:
        return (TRAIN,)
    return (TRAIN, ROBUSTNESS, ANSWERS) + ((EXITS,) if evaluation.exit_prompts and run.seed == 0 else ())


def keeps_weights(keep: str, run: RunKey) -> bool:
    """Whether `--keep_models keep` keeps `run`'s weights once its phases are recorded."""
    return keep == "all" or (keep == "seed0" and run.seed == 0)


# a study's recipe: its models answer instructions, so its trainer config is SFT's (`max_length`, ...)
LLMRecipe: TypeAlias = Recipe[Any, ConstrainedSFTConfig]


def is_llm_recipe(recipe: AnyRecipe) -> TypeGuard[LLMRecipe]:
    return isinstance(recipe.training, ConstrainedSFTConfig)


@dataclass(frozen=True)
class Job:
    """Phases of one run, everything a fresh process needs to do them (`run_job`). `restart`: the run's weights are
    gone with phases left, so it trains again from nothing; `estimates`: the plan's seconds per phase, recorded beside
    the measured ones; `jobs`: runs sharing the device; `data_dir`: where runs share their prepared data; `writes`:
    whether this process writes the run's record (under `accelerate launch` every process trains the run, and the
    main one writes: two renaming the same temporary file fail)."""

    study: StudyFolder
    task: str
    run: RunKey
    recipe: LLMRecipe  # a study's (`is_llm_recipe`)
    evaluation: Evaluation | None  # None: `--stage train`, the run is trained and nothing else
    phases: tuple[str, ...] = (TRAIN,)
    keep: str = "all"
    restart: bool = False
    data_dir: str | None = None
    estimates: dict[str, float] = field(default_factory=dict, compare=False)
    jobs: int = 1
    writes: bool = True
    gpus: int = 1  # devices the run trains on: above 1 under `accelerate launch` (`launch_training`)
    launch_config: str | None = None  # that launch's accelerate config (a file)

    @property
    def name(self) -> str:
        return self.run.name if self.phases != (EXITS,) else f"{self.run.name} exits"

    @property
    def folder(self) -> str:
        return self.study.run(self.run)

    @property
    def last(self) -> bool:
        """Whether this job ends the run (its weights may then go)."""
        return required(self.evaluation, self.run)[-1] in self.phases


def train(job: Job, callbacks: Sequence[TrainerCallback] = ()) -> float:
    """Train the run into its folder unless it is finished (a checkpoint resumes); the seconds it took (0 when it
    was finished already)."""
    if is_finished(job.folder):
        return 0.0
    checkpoints = os.path.isdir(job.folder) and any(f.startswith("checkpoint-") for f in os.listdir(job.folder))
    training = dataclasses.replace(
        job.recipe.training,
        output_dir=job.folder,
        seed=job.run.seed,
        resume_from_checkpoint=True if checkpoints else None,  # type: ignore[arg-type]  # annotated str; True: the last
    )
    start = time.perf_counter()
    if job.gpus > 1:  # this process stays out of the launch: it goes on with the phases after, on the first device
        launch_training(dataclasses.replace(job, recipe=dataclasses.replace(job.recipe, training=training)))
        return time.perf_counter() - start
    recipe = Recipe(job.recipe.script, job.recipe.model, training)
    role = get_task(job.task).training
    if not isinstance(role, SharedDataTraining):  # `conduct.checked_arms` refuses such a task before any work
        raise TypeError(f"`task: {job.task}` cannot train a study's runs (they share prepared data).")
    role.train(recipe, more_runs=True, data_dir=job.data_dir, callbacks=callbacks)
    return time.perf_counter() - start


def launch_training(job: Job) -> None:
    """Train `job.recipe` (its `output_dir` the run's folder) under `accelerate launch` on `job.gpus` processes with
    the study's launch config (`--accelerate_config`; FSDP2 for an 8B model's full fine-tuning), while this worker
    waits; it then measures the run in one process (robustness, answers and exits need no launch). The job crosses
    to the launched processes as JSON beside the run's folder (`job_spec`; `python -m
    constrained_sft.study.launched <file>`), removed once they end. A failed launch raises with its last lines."""
    path = job.folder.rstrip("/") + ".launch.json"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json(path, job_spec(job))
    how = ["--config_file", job.launch_config] if job.launch_config else ["--multi_gpu"]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *how, "--num_processes", str(job.gpus)]
    cmd += ["--num_machines", "1", "-m", "constrained_sft.study.launched", path]
    config = job.launch_config or "accelerate's --multi_gpu"
    print(f"{job.name}: training on {job.gpus} processes (accelerate launch --config_file {config})", flush=True)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    finally:
        os.remove(path)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"{job.name}: the launch of its training on {job.gpus} devices failed:\n{tail}")


def job_spec(job: Job) -> JSONObject:
    """What a launched process needs of `job` to train it, as JSON: the run, the folders, the task and the recipe's
    three dataclasses by field (the trainer config as transformers serialises it; hub tokens left out, the launched
    processes read HF_TOKEN from the environment as the Hub client does)."""

    def fields(value: object) -> JSONObject:
        if hasattr(value, "to_dict"):  # TrainingArguments: enums as their values
            data = value.to_dict()
        else:
            data = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}  # type: ignore[arg-type]
        safe: JSONObject = json_safe({k: v for k, v in data.items() if not k.endswith("_token")})
        return safe

    r = job.recipe
    recipe = {"script": fields(r.script), "model": None if r.model is None else fields(r.model)}
    where = {"study": job.study.root, "task": job.task, "run": job.run.name, "data_dir": job.data_dir}
    return {**where, "gpus": job.gpus, "recipe": {**recipe, "training": fields(r.training)}}


def job_from_spec(spec: JSONRead) -> Job:
    """The job `job_spec` wrote, its recipe's dataclasses built again from their fields (the task's own classes)."""
    task = get_task(spec["task"])
    script_cls, model_cls, training_cls = task.parser_classes()[-3:]
    r = spec["recipe"]
    model = None if r["model"] is None else model_cls(**r["model"])
    recipe = Recipe(script_cls(**r["script"]), model, training_cls(**r["training"]))
    run = RunKey.parse(spec["run"])
    return Job(StudyFolder(spec["study"]), spec["task"], run, recipe, None, data_dir=spec["data_dir"], gpus=1)


def start_over(job: Job) -> None:
    """The run's folder and record removed: its weights are gone with phases left (see the module docstring)."""
    logger.warning("%s: its weights are gone with phases left; it trains again and its record starts over.", job.name)
    if os.path.isdir(job.folder):
        shutil.rmtree(job.folder)
    if os.path.isfile(job.study.record(job.run)):
        os.remove(job.study.record(job.run))


def run_job(job: Job, callbacks: Sequence[TrainerCallback] = ()) -> RunRecord:
    """The job's phases in order, each written to the run's record as it ends; returns the record as written. Runs
    in the study's process, in a worker of `--jobs` (the record comes back pickled) or in a Slurm job (`callbacks`:
    the training's, there `trainers.signals.SaveOnSignal`)."""
    task = get_task(job.task)
    key = task.headline.key
    if job.restart:
        start_over(job)
    record = read_run_record(job.study, job.run, key) or RunRecord(job.run.name)

    def done(phase: str, started: float) -> None:
        record.seconds[phase], record.jobs[phase] = round(clock.now() - started, 2), job.jobs
        if phase in job.estimates:
            record.estimates[phase] = round(job.estimates[phase], 2)
        if job.writes:
            write_run_record(job.study, record, key)

    if TRAIN in job.phases:
        started = clock.now()
        # 0 s: finished before it was recorded, nothing measured, nothing to learn an estimate from
        if train(job, callbacks) == 0.0:
            started = clock.now()
        done(TRAIN, started)
    if job.evaluation is None:
        return record
    e = job.evaluation
    sigma = e.run_sigma(job.folder)
    record.sigma_x, record.model = sigma, model_fingerprint(job.folder)
    phases: dict[
        str, Callable[[], object]
    ] = {  # each the evaluation's own measurement of the run's folder, written where the study keeps it
        ROBUSTNESS: lambda: e.robustness(task, job.recipe.script, job.data_dir, job.folder, job.run.name, sigma),
        ANSWERS: lambda: e.answer(job.folder, job.run.stem, job.study.generations, sigma),
        EXITS: lambda: e.decode(job.folder, job.run.arm, job.study.exits, sigma),
    }
    kept = {ROBUSTNESS: "robustness", ANSWERS: "empty_answers", EXITS: "exits"}
    for phase in (p for p in (ROBUSTNESS, ANSWERS, EXITS) if p in job.phases):
        started = clock.now()
        setattr(record, kept[phase], phases[phase]())
        done(phase, started)
    if job.last and not keeps_weights(job.keep, job.run) and has_weights(job.folder):
        delete_weights(job.folder)  # after the last record: a kill in between keeps the weights, never loses the run
    return record
