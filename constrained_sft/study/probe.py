"""
What a study's first plan prices each phase at, before any run has finished: a probe, one short run of the first
pending run's recipe, every phase measured on its own and scaled to the study's sizes.

- train: the time before the first step (the model, the data: its first preparation, which every later run reuses,
  included, so an over-estimate), the mean optimizer step *after warm-up* (the first `WARMUP_STEPS` steps pay for the
  CUDA context, the allocator and the first kernels, ~4-6x a warm step on an H100; they are timed and left out) times
  the run's steps, and the final evaluation and save. A recipe that trains by passes over its data (`max_steps` -1,
  `num_train_epochs`) has its steps derived from the data: the probe's trainer counts one pass's optimizer steps
  (its dataloader's batches over `gradient_accumulation_steps`, as `Trainer` does; packed rows are counted packed);
- robustness: a model load and one level at one noise seed, times the levels and seeds;
- answers: one batch of answers at `PROBE_TOKENS` new tokens, times the batches, levels and the study's answer length
  (an upper bound: an answer that ends early costs less);
- exits: one prompt decoded at batch 1, plainly and drafted by every exit layer, at `PROBE_TOKENS` new tokens, times
  the prompts and the study's length (a batch-1 decode is priced as what it is, not as a share of a batch).

Nothing the probe writes is kept but its figures (`timings.json`, with the device they were measured on: a later call
on the same device plans from them instead of probing again, which would spend its budget on what it knows). Its
figures are for one run alone on the device (`schedule.Estimate` scales them to runs sharing it).
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import tempfile
from collections.abc import Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING

from transformers import TrainerCallback

from ..data import ModelSpec
from ..evaluation.loading import auto_bf16
from ..tasks import get_task
from ..utils.types import JSONObject, JSONRead
from . import clock
from .phases import Job, train
from .record import ANSWERS, EXITS, ROBUSTNESS, TRAIN
from .study_folder import StudyFolder

if TYPE_CHECKING:  # what transformers hands every callback
    import torch
    from transformers import TrainerControl, TrainerState, TrainingArguments

PROBE_STEPS, WARMUP_STEPS = 12, 4  # steps of the probe, of which the first are warm-up (timed, left out)
PROBE_TOKENS = 32  # new tokens per probed answer and exit decode


class StepTimer(TrainerCallback):
    """Each optimizer step's seconds on the study's clock, and when training began and ended."""

    def __init__(self) -> None:
        self.steps: list[float] = []
        self.begun: float | None = None
        self.train_begin: float | None = None
        self.train_end: float | None = None
        self.epoch_steps = 0  # optimizer steps of one pass over the training rows

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> None:
        self.train_begin = clock.now()
        loader = kwargs.get("train_dataloader")
        if isinstance(loader, Sized):
            self.epoch_steps = math.ceil(len(loader) / args.gradient_accumulation_steps)

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> None:
        self.begun = clock.now()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> None:
        if self.begun is not None:  # every step begins before it ends
            self.steps.append(clock.now() - self.begun)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: object
    ) -> None:
        self.train_end = clock.now()


@dataclass
class ProbeTimes:
    """The probe's measurements (seconds)."""

    before_steps: float  # from the call to the first step: loading the model and the data, building the trainer
    steps: list[float]  # every optimizer step, warm-up included
    after_steps: float  # the final evaluation and the save
    load: float = 0.0  # one model load for evaluation
    level: float = 0.0  # one robustness level at one noise seed
    answer_batch: float = 0.0  # one batch of answers at `tokens` new tokens
    exit_prompt: float = 0.0  # one prompt, plain and at every exit layer, at `tokens` new tokens
    tokens: int = PROBE_TOKENS
    epoch_steps: int = 0  # optimizer steps of one pass over the training rows (0: not counted)

    @property
    def warm_step(self) -> float:
        warm = self.steps[WARMUP_STEPS:] or self.steps
        return statistics.mean(warm)

    def phases(self, job: Job) -> dict[str, float]:
        """Seconds per phase of a run of `job`'s recipe, alone on the device."""
        e, t = job.evaluation, job.recipe.training
        out = {
            TRAIN: self.before_steps + self.warm_step * (optimizer_steps(t, self.epoch_steps) or 0) + self.after_steps
        }
        if e is None:
            return out
        n = e.instruction_count
        out[ROBUSTNESS] = self.load + self.level * len(e.gammas) * e.noise_seeds
        batches = math.ceil(n / e.generation_batch_size) * len(e.generation_gammas)
        out[ANSWERS] = self.load + self.answer_batch * batches * e.max_new_tokens / self.tokens
        if e.exit_prompts:
            out[EXITS] = self.load + self.exit_prompt * e.exit_prompts * e.exit_new_tokens / self.tokens
        return out

    def describe(self) -> str:
        warm = self.steps[:WARMUP_STEPS]
        text = (
            f"{self.warm_step:.3g} s/step after warm-up (the first {len(warm)} steps took "
            f"{statistics.mean(warm):.3g} s/step), {self.before_steps:.3g} s before the first step, "
            f"{self.after_steps:.3g} s to evaluate and save"
        )
        if self.load:
            text += (
                f"; a model load {self.load:.3g} s, a robustness level {self.level:.3g} s, a batch of answers "
                f"{self.answer_batch:.3g} s and one exit-decoded prompt {self.exit_prompt:.3g} s at "
                f"{self.tokens} new tokens"
            )
        return text


def optimizer_steps(training: TrainingArguments, epoch_steps: int) -> int | None:
    """A run's optimizer steps: `max_steps`, or with `max_steps` <= 0 `num_train_epochs` passes of `epoch_steps`
    (None while the steps of a pass are not counted)."""
    if training.max_steps > 0:
        return int(training.max_steps)
    return math.ceil(training.num_train_epochs * epoch_steps) if epoch_steps else None


def device_name() -> str:
    """The device the probe times: the GPU's name, else the CPU with its cores."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"cpu x{os.cpu_count()}"


def probed(job: Job, kept: JSONRead | None) -> tuple[ProbeTimes, JSONObject]:
    """The probe's figures for `job`: `kept` (an earlier call's, `timings.json`) where they were measured on this
    device (the study's settings are the same in every call: its folder refuses others), else a new probe; with
    their kept form."""
    here = {"device": device_name()}
    if kept and {k: kept.get(k) for k in here} == here:
        try:
            times = ProbeTimes(**kept["times"])
            if optimizer_steps(job.recipe.training, times.epoch_steps) is not None:
                return times, kept
        except (KeyError, TypeError):
            pass  # an unreadable entry, or one without the steps of a pass this recipe needs: probe again
    times = probe(job)
    return times, {**here, "times": dataclasses.asdict(times)}


def probe(job: Job) -> ProbeTimes:
    """Measure `job`'s phases on a short run of its recipe (see the module docstring)."""
    e = job.evaluation
    planned = job.recipe.training.max_steps
    steps = min(PROBE_STEPS, max(planned, WARMUP_STEPS + 2)) if planned > 0 else PROBE_STEPS
    with tempfile.TemporaryDirectory() as scratch:
        training = dataclasses.replace(
            job.recipe.training, max_steps=steps, save_strategy="no", resume_from_checkpoint=None
        )
        study = StudyFolder(os.path.join(scratch, "study"))
        short = dataclasses.replace(job, study=study, recipe=dataclasses.replace(job.recipe, training=training))
        timer = StepTimer()
        start = clock.now()
        train(short, callbacks=[timer])
        end = clock.now()
        begun, ended = timer.train_begin, timer.train_end
        if begun is None or ended is None:  # a fresh folder always trains: the trainer skipped its callbacks
            raise RuntimeError(f"the probe's short run of {job.name} did not report its training's start and end.")
        times = ProbeTimes(begun - start, timer.steps, end - ended, epoch_steps=timer.epoch_steps)
        if e is None:
            return times
        folder, task = short.folder, get_task(job.task)
        sigma = e.run_sigma(folder)  # the study's, else the one the short run recorded
        start = clock.now()
        model, tokenizer = task.measuring.load_model(ModelSpec("probe", folder), _dtype())
        times.load = clock.now() - start
        one_level = dataclasses.replace(e, gammas=e.gammas[-1:], noise_seeds=1)
        start = clock.now()
        one_level.robustness(task, job.recipe.script, job.data_dir, folder, "probe", sigma, model, tokenizer)
        times.level = clock.now() - start
        del model, tokenizer
        one_batch = dataclasses.replace(
            e,
            max_instances=min(e.instruction_count, e.generation_batch_size),
            generation_gammas=e.generation_gammas[-1:],
            max_new_tokens=PROBE_TOKENS,
        )
        start = clock.now()
        one_batch.answer(folder, "probe", study.generations, sigma)
        times.answer_batch = max(clock.now() - start - times.load, 0.0)
        if e.exit_prompts:
            one_prompt = dataclasses.replace(e, exit_prompts=1, exit_new_tokens=PROBE_TOKENS)
            start = clock.now()
            one_prompt.decode(folder, "probe", study.exits, sigma)
            times.exit_prompt = max(clock.now() - start - times.load, 0.0)
    return times


def _dtype() -> torch.dtype:
    import torch

    return torch.bfloat16 if auto_bf16() else torch.float32
