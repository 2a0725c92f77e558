"""
The paper's LLM comparison (Section 6) as one resumable run: a constrained recipe and its ERM twin (and any
`--arm`), each trained with seeds 0..N-1, seed-major, one run at a time or `--jobs` at once (`schedule`); right after
it trains, each run is measured (token accuracy and loss against the noise level), answers the instructions at the
generation levels and, for seed 0, decodes self-speculatively (`phases`); then, from these records alone, the arms
compared with paired-bootstrap intervals over training seeds and held-out sequences, each arm's answers judged
against the reference arm's in both orders, seed s against seed s, and one report (`finish`). Writes into
`study_dir`, whose every path `folder.StudyFolder` names (the trained runs, whose weights `--keep_models` keeps once
recorded; each run's record: a run with a record is done; the comparisons, answers, verdicts and exit decoding; the
instruction set, by default the held-out first turns with their reference answers; study.json and the report).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

from ..comparison import RunKey, check_comparison_folder, comparison_levels, study_arms
from ..config import training_level
from ..data import delete_weights, has_weights
from ..data.instructions import held_out_instructions
from ..evaluation import ALPACA_EVAL_SIZE
from ..evaluation.alpaca import check_judge
from ..evaluation.instructions import ALPACA_EVAL, load_instructions
from ..tasks import Recipe, SharedDataTraining, Task, is_finished
from ..utils.files import write_text
from . import clock
from .after_training import Evaluation
from .arguments import HELD_OUT, StudyArguments
from .finish import compared, finish_study, judge_arguments, seeds_with
from .phases import Job, required
from .probe import ProbeTimes
from .probe import probed as probe_times
from .record import EXITS, ROBUSTNESS, TRAIN, RunRecord, read_record
from .results import InstructionSet, StudyResults, StudyTimings, TrainedRuns
from .schedule import Estimate, choose_jobs, estimate, fitting, plan_lines, run_all

COMMAND = "study"


def checked_arms(
    args: StudyArguments, task: Task, constrained: Recipe, erm: Recipe, more: dict[str, Recipe]
) -> tuple[StudyArguments, dict[str, Recipe], list[str]]:
    """Everything checked before any work, the settings resolved once: the options (with `study_dir` given its
    default), the task, the arms (`comparison.study_arms`), the launch and the judge. Returns the resolved options,
    the arms ({name: recipe}) and the training fields on which the arms differ."""
    args.validate()
    if not task.generates or not isinstance(task.training, SharedDataTraining):
        raise ValueError(f"`task: {task.name}` models do not answer instructions; the study compares LLM recipes.")
    recipes, differences = study_arms(constrained, erm, more)
    if world_size() > 1 and (args.stage != "train" or args.jobs > 1):
        raise ValueError(
            f"`--stage {args.stage}`{f' with `--jobs {args.jobs}`' if args.jobs > 1 else ''} under {world_size()} "
            "processes: training runs on every process (`accelerate launch ... study --stage train`), then "
            "evaluation, generation and judging in one process on one GPU (`constrained-sft study ... --stage "
            "evaluate`); --jobs runs several single-process runs at once, without a launcher."
        )
    if args.stage != "train":  # credentials, judge model or encoder: before hours of training
        check_judge(judge_arguments(args, *compared(args, list(recipes))[0]))
    study_dir = args.study_dir or f"{constrained.training.output_dir.rstrip('/')}-study"
    return dataclasses.replace(args, study_dir=study_dir), recipes, differences


def world_size() -> int:
    """Processes of this launch (`accelerate launch` / torchrun set WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0 of this launch, or the only process (`accelerate launch` / torchrun set RANK)."""
    return int(os.environ.get("RANK", "0")) == 0


def instruction_set(args: StudyArguments, recipe: Recipe) -> tuple[str, InstructionSet]:
    """The instruction file every model answers, and how it was built."""
    if args.instructions != HELD_OUT:
        rows = load_instructions(args.instructions, args.max_instances)
        full = args.instructions == ALPACA_EVAL and len(rows) == ALPACA_EVAL_SIZE
        return args.instructions, InstructionSet(args.instructions, len(rows), is_full_alpaca_eval=full)
    rows, counts = held_out_instructions(recipe.script, args.max_instances)
    path = args.folder.instructions
    write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
    return path, InstructionSet(f"held-out first turns of {recipe.script.dataset_name}", **counts)


def run(
    args: StudyArguments, task: Task, constrained: Recipe, erm: Recipe, more: dict[str, Recipe] | None = None
) -> StudyResults | TrainedRuns:
    """The study's stages (`args.stage`); every input checked before the first run starts. `more`: the `--arm`s
    ({name: recipe}). With `--stage train`, or when no seed of every arm has been measured yet (`--time_budget`): the
    runs' folders and timings, and the runs still to do; else the study's results over the seeds every arm has."""
    started = clock.now()  # the time budget counts from here: preparing the data and the probe spend it too
    args, recipes, differences = checked_arms(args, task, constrained, erm, more or {})
    runs = [RunKey(seed, arm) for seed in range(args.training_seeds) for arm in recipes]  # seed-major
    records, timings = open_study(args, task, recipes, runs)
    evaluation, instructions = None, None
    if args.stage != "train":
        path, instructions = instruction_set(args, constrained)
        evaluation = evaluation_settings(args, task, constrained, path)
    recipes = {arm: data_processes(recipe, args.jobs) for arm, recipe in recipes.items()}
    queue = jobs_left(args, task, recipes, runs, records, evaluation)
    check_trained(args, queue)
    if evaluation is not None:
        drop_weights(args, runs, records, evaluation, queue)
    book = Bookkeeper(args.folder.root, records, timings, queue)
    jobs, est, budget = plan(args, queue, book, len(runs), started)
    left = run_all(queue, jobs, budget, est, book.on_done)
    if world_size() > 1:  # the runs kept the process group for each other; the last one is done with it
        from accelerate import PartialState

        PartialState().destroy_process_group()
    folders = {arm: [args.folder.run(RunKey(s, arm)) for s in range(args.training_seeds)] for arm in recipes}
    missing = [job.name for job in left]
    if left:
        print(f"not started (the time budget): {', '.join(missing)}; the same command continues with them.")
    if evaluation is None or instructions is None or seeds_with(records, recipes, ROBUSTNESS) == 0:
        return TrainedRuns(folders, timings, missing)
    return finish_study(args, task, recipes, records, evaluation, instructions, differences, timings, missing)


def open_study(
    args: StudyArguments, task: Task, recipes: dict[str, Recipe], runs: list[RunKey]
) -> tuple[dict[str, RunRecord], StudyTimings]:
    """The study folder's checks (`comparison.check_comparison_folder`), then its records and timings, each checked
    before anything is written (a refused record leaves the folder as it was); then the folder marked, by one
    writer."""
    args.folder.check_parts()
    folder = check_comparison_folder(args.folder.root, COMMAND, args.folder_settings(recipes), "--study_dir", recipes)
    key = task.headline.key
    records = {run.name: r for run in runs if (r := read_record(args.folder, run, key)) is not None}
    timings = StudyTimings.load(args.folder.root)
    if is_main_process():
        folder.mark()
    return records, timings


def check_trained(args: StudyArguments, queue: list[Job]) -> None:
    """`--stage evaluate` refused while a run is not trained, naming them."""
    if args.stage == "evaluate" and (untrained := [j for j in queue if TRAIN in j.phases]):
        gone = [j.folder for j in untrained if j.restart]
        raise FileNotFoundError(
            f"`--stage evaluate`: runs not trained {[j.folder for j in untrained if not j.restart]}"
            + (f" and runs whose weights are gone with phases left {gone} (they train again)" if gone else "")
            + "; run `--stage train` (or `all`) first."
        )


@dataclasses.dataclass
class Bookkeeper:
    """What the study knows as its jobs end: each run's record and the phases' timings (saved by one writer), and
    the estimate the plan then goes on from (`probed`: the probe's figures, where it ran)."""

    study_dir: str
    records: dict[str, RunRecord]
    timings: StudyTimings
    queue: list[Job]
    probed: ProbeTimes | None = None

    def on_done(self, job: Job, done: RunRecord) -> Estimate | None:
        self.records[job.run.name] = done
        for phase in job.phases:
            self.timings.add_phase(job.run.name, phase, done.seconds[phase], job.estimates.get(phase))
        if is_main_process():  # one writer: ranks renaming the same temporary file over each other fail
            self.timings.save(self.study_dir)
        took = sum(done.seconds[p] for p in job.phases)
        planned = sum(job.estimates.values())
        print(f"finished {job.name} in {took:.0f} s" + (f" (estimated {planned:.0f} s)" if job.estimates else ""))
        return estimate(self.records, self.probed, self.queue[0] if self.queue else None)


def plan(args: StudyArguments, queue: list[Job], book: Bookkeeper, total: int, started: float):
    """(runs at once, the estimate, the seconds of budget left): with `--time_budget`, a queue the records cannot price
    probed first, and refused when no job fits; the plan printed."""
    budget = None if args.time_budget is None else args.time_budget * 60
    est = estimate(book.records, None, None)
    if budget is not None and queue and unpriced(est, queue):
        book.probed, book.timings.probe = probe_times(queue[0], book.timings.probe)
        if is_main_process():
            book.timings.save(args.folder.root)
        est = estimate(book.records, book.probed, queue[0])
    spent = clock.now() - started
    if budget is not None:
        budget = max(budget - spent, 0.0)
    jobs = choose_jobs(queue, est, args.jobs, budget)
    if budget is not None and queue and est is not None and not fitting(queue, est, jobs, budget):
        alone = est.total(queue[0], 1) / 60
        raise ValueError(
            f"`--time_budget` {args.time_budget:g} min: no job can finish in it ({queue[0].name} alone is estimated at "
            f"{alone:.1f} min{', after ' + format(spent, '.0f') + ' s of preparation and probe' if spent >= 1 else ''}"
            f"); give `--time_budget` >= {math.ceil(alone + spent / 60)} (the study keeps what it prepared)."
        )
    if is_main_process() and (queue or budget is not None):
        done = total - len({j.run for j in queue})
        print("\n".join(plan_lines(queue, done, total, est, jobs, budget, spent)))
    return jobs, est, budget


def drop_weights(args: StudyArguments, runs: list[RunKey], records, evaluation: Evaluation, queue: list[Job]) -> None:
    """Weights `--keep_models` no longer keeps, of runs whose phases are all recorded (a rerun of a finished study
    with `--keep_models none`): deleted, and said; a run with phases left keeps its weights until its last."""
    pending = {job.run for job in queue}
    for run in runs:
        folder, record = args.folder.run(run), records.get(run.name)
        keeps = args.keep_models == "all" or (args.keep_models == "seed0" and run.seed == 0)
        if keeps or run in pending or record is None or not has_weights(folder):
            continue
        if all(record.done(p) for p in required(evaluation, run) if p != TRAIN):
            freed = delete_weights(folder)
            print(f"{run.name}: every phase recorded; its weights deleted (`--keep_models {args.keep_models}`), "
                  f"{freed / 2**20:.0f} MiB freed")  # fmt: skip


def data_processes(recipe: Recipe, jobs: int) -> Recipe:
    """The recipe with `dataset_num_proc` from the cores each of `jobs` runs gets, where it sets none (the data is
    tokenized once for the study, by whichever run comes first: `data.prepared_splits`)."""
    if recipe.training.dataset_num_proc is not None:
        return recipe
    procs = max(1, (os.cpu_count() or 1) // jobs)
    training = dataclasses.replace(recipe.training, dataset_num_proc=procs if procs > 1 else None)
    return dataclasses.replace(recipe, training=training)


def jobs_left(
    args: StudyArguments, task: Task, recipes, runs: list[RunKey], records, evaluation: Evaluation | None
) -> list[Job]:
    """Each run's phases still to do as jobs: the runs in seed-major order, then the seed-0 exit decodings. A run
    whose weights are gone with phases left restarts (`phases.start_over`)."""
    main, exits = [], []
    for run in runs:
        phases = required(evaluation, run)
        record, folder = records.get(run.name), args.folder.run(run)
        left = [p for p in phases if not (record and record.done(p)) and not (p == TRAIN and is_finished(folder))]
        restart = any(p != TRAIN for p in left) and is_finished(folder) and not has_weights(folder)
        if restart:
            left = list(phases)
            records.pop(run.name, None)
        job = Job(args.folder, task.name, run, recipes[run.arm], evaluation, keep=args.keep_models,
                  data_dir=args.folder.data)  # fmt: skip
        if main_phases := tuple(p for p in left if p != EXITS):
            main.append(dataclasses.replace(job, phases=main_phases, restart=restart))
        if EXITS in left:
            exits.append(dataclasses.replace(job, phases=(EXITS,), restart=restart and not main_phases))
    return main + exits


def unpriced(est, queue: list[Job]) -> bool:
    """Whether a phase of the queue has no figure yet (no finished phase of its kind, no probe)."""
    return est is None or any(est.phase(j.run.arm, p, 1) == 0.0 for j in queue for p in j.phases)


def evaluation_settings(args: StudyArguments, task: Task, recipe: Recipe, instructions: str) -> Evaluation:
    """What every run is measured with right after it trains (`phases.Evaluation`)."""
    train_gamma = training_level(recipe.training.noise_gamma)
    gammas = comparison_levels(args.gammas, recipe.training.noise_gamma)
    curve = sorted({gammas[0], min(gammas, key=lambda g: abs(g - train_gamma)), gammas[-1]})
    return Evaluation(
        gammas=gammas, curve_gammas=curve, train_gamma=train_gamma, noise_seeds=args.noise_seeds,
        batch_size=recipe.training.per_device_eval_batch_size, max_length=recipe.training.max_length or 1024,
        instructions=instructions, max_instances=args.max_instances, generation_gammas=args.generation_gammas,
        generation_batch_size=args.generation_batch_size, max_new_tokens=args.max_new_tokens,
        exit_prompts=args.exit_prompts, exit_layers=args.exit_layers, exit_new_tokens=args.exit_new_tokens,
        bootstrap_samples=args.bootstrap_samples, sigma_x=recipe.training.noise_sigma,
    )  # fmt: skip
