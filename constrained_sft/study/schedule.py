"""
How a study spends its time: its runs one after the other in this process, or `--jobs N` at once in N worker
processes sharing the device (a small model leaves a GPU mostly idle: host-bound, N processes train ~N times as many
steps per second up to the device's limit); with `--time_budget`, a plan printed before any run starts and no run
started that cannot finish inside the budget. Runs start in seed-major order (every arm's seed 0, then seed 1, ...),
so a study cut short still holds comparable seeds.

A run's duration is estimated from the study's own records (the mean of the finished runs of its arm, else of all
runs: measured under the same `--jobs`), else from a probe: a few optimizer steps of the first run's recipe, one
evaluation pass and one batch of answers, timed, then scaled to the run's steps, levels and instructions. The probe
runs alone, so with N jobs its estimate is multiplied by N (each process gets at least 1/N of the device): an
over-estimate, which starts fewer runs, never one that cannot finish.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context

from ..evaluation.alpaca.generate import GenerateArguments
from ..evaluation.alpaca.generate import run as generate
from ..evaluation.instructions import load_instructions
from ..tasks import Recipe, get_task
from .runs import Job, RunRecord, run_job

PROBE_STEPS = 4


@dataclass
class Estimate:
    """Seconds per run by arm ('*': any arm), and where the numbers come from (said in the plan)."""

    seconds: dict[str, float]
    source: str

    def of(self, job: Job) -> float:
        return self.seconds.get(job.arm, self.seconds["*"])


def from_records(records: dict[str, RunRecord]) -> Estimate | None:
    """The mean wall time of the finished runs, per arm and overall; None before any run has a record."""
    by_arm: dict[str, list[float]] = {}
    for name, record in records.items():
        if "total" in record.seconds:
            by_arm.setdefault(name.split("/")[0], []).append(record.seconds["total"])
    if not by_arm:
        return None
    every = [s for runs in by_arm.values() for s in runs]
    means = {arm: sum(s) / len(s) for arm, s in by_arm.items()}
    return Estimate({**means, "*": max(means.values())}, f"the {len(every)} run(s) this study has finished")


def probe(job: Job, n_jobs: int) -> Estimate:
    """A few steps of `job`'s recipe, one evaluation pass and one batch of answers, timed (see the module
    docstring); nothing of it is kept."""
    recipe, e = job.recipe, job.evaluation
    with tempfile.TemporaryDirectory() as scratch:
        training = dataclasses.replace(recipe.training, output_dir=os.path.join(scratch, "run"), max_steps=PROBE_STEPS,
                                       save_strategy="no", resume_from_checkpoint=None, seed=job.seed)  # fmt: skip
        start = time.perf_counter()
        trained = get_task(job.task).training.train(Recipe(recipe.script, recipe.model, training), more_runs=True)
        wall = time.perf_counter() - start
        with open(os.path.join(training.output_dir, "trainer_state.json")) as f:
            runtime = next(h["train_runtime"] for h in reversed(json.load(f)["log_history"]) if "train_runtime" in h)
        evaluation = float(trained.after.get("eval_runtime", 0.0))
        load = max(wall - runtime - evaluation, 0.0)  # loading, data preparation, saving
        step = runtime / PROBE_STEPS  # warm-up included: an over-estimate
        seconds = load + step * recipe.training.max_steps + evaluation
        detail = f"{step:.3g} s/step, an evaluation pass {evaluation:.3g} s, loading {load:.3g} s"
        if e is not None:
            seconds += load + evaluation * len(e.gammas) * e.noise_seeds  # the robustness grid
            n = len(load_instructions(e.instructions, e.max_instances))
            start = time.perf_counter()
            generate(
                GenerateArguments(model=training.output_dir, name="probe", output_dir=os.path.join(scratch, "answers"),
                                  instructions=e.instructions, max_instances=min(n, e.generation_batch_size),
                                  gammas=[0.0], batch_size=e.generation_batch_size, max_new_tokens=e.max_new_tokens)
            )  # fmt: skip
            batch = time.perf_counter() - start
            seconds += batch * math.ceil(n / e.generation_batch_size) * len(e.generation_gammas)
            detail += f", a batch of answers {batch:.3g} s"
            if e.exit_prompts:  # seed 0 only; each prompt decoded once plain and once per exit layer, batch 1
                per_prompt = batch / e.generation_batch_size * e.exit_new_tokens / max(e.max_new_tokens, 1)
                depth = 1 + (len(e.exit_layers) if e.exit_layers else 3)  # plain + each exit (default: 3 exits)
                seconds += per_prompt * e.exit_prompts * depth
    scale = f"; x{n_jobs} for {n_jobs} jobs sharing the device" if n_jobs > 1 else ""
    return Estimate({"*": seconds * n_jobs}, f"a {PROBE_STEPS}-step probe ({detail}){scale}")


def plan_lines(
    pending: list[Job], done: int, estimate: Estimate | None, n_jobs: int, budget: float | None
) -> list[str]:
    """What the study will do, before it starts: runs left, their steps, the estimate and what the budget allows."""
    total = len(pending) + done
    steps = sorted({job.recipe.training.max_steps for job in pending})
    lines = [f"plan: {len(pending)} of {total} run(s) left ({', '.join(j.name for j in pending) or 'none'}), "
             f"{'/'.join(map(str, steps)) or '-'} optimizer steps each, {n_jobs} at a time"]  # fmt: skip
    if estimate is None or not pending:
        return lines
    per_run = [estimate.of(job) for job in pending]
    lines.append(
        f"estimate: about {sum(per_run) / len(per_run):.0f} s per run (from {estimate.source}); all {len(pending)} in "
        f"about {sum(per_run) / n_jobs / 60:.1f} min"
    )
    if budget is not None:
        fit = len(fitting(pending, estimate, n_jobs, budget))
        lines.append(
            f"budget: {budget / 60:.1f} min: {fit} run(s) fit and start; the other {len(pending) - fit} wait for the "
            "next call (the same command continues)"
        )
    return lines


def fitting(pending: list[Job], estimate: Estimate, n_jobs: int, budget: float) -> list[Job]:
    """The runs, in order, that start and finish inside `budget` seconds with `n_jobs` slots (each run starting
    when the slot that frees first is free); the first that cannot stops the list (seed-major order)."""
    slots = [0.0] * n_jobs
    out = []
    for job in pending:
        slot = min(range(n_jobs), key=slots.__getitem__)
        if slots[slot] + estimate.of(job) > budget:
            break
        slots[slot] += estimate.of(job)
        out.append(job)
    return out


def now() -> float:
    """The scheduler's clock (seconds; a test replaces it)."""
    return time.monotonic()


def _worker_init(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def run_all(
    pending: list[Job],
    n_jobs: int,
    budget: float | None,
    estimate: Estimate | None,
    on_done: Callable[[Job, dict], Estimate | None],
) -> list[Job]:
    """Run `pending` (seed-major), at most `n_jobs` at a time; with `budget` (seconds from now) start a run only if
    its estimate ends inside the budget. `on_done(job, record)` is called in this process as each run ends and may
    return a better estimate. Returns the runs not started."""
    deadline = None if budget is None else now() + budget
    queue = list(pending)

    def fits(job: Job) -> bool:
        if deadline is None or estimate is None:
            return True
        return now() + estimate.of(job) <= deadline

    if n_jobs == 1:
        while queue and fits(queue[0]):
            job = queue.pop(0)
            estimate = on_done(job, run_job(job)) or estimate
        return queue
    threads = max(1, (os.cpu_count() or 1) // n_jobs)
    context = get_context("spawn")  # a fresh interpreter per worker: no CUDA state, no process group inherited
    with ProcessPoolExecutor(n_jobs, mp_context=context, initializer=_worker_init, initargs=(threads,)) as pool:
        running = {}
        while queue or running:
            while queue and len(running) < n_jobs and fits(queue[0]):
                job = queue.pop(0)
                running[pool.submit(run_job, job)] = job
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                job = running.pop(future)
                estimate = on_done(job, future.result()) or estimate  # a failed run raises here, naming itself
    return queue
