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

from ..comparison import check_comparison_folder
from ..data import ModelSpec, delete_weights, has_weights
from ..data.instructions import held_out_instructions
from ..evaluation import ALPACA_EVAL_SIZE
from ..evaluation.instructions import ALPACA_EVAL, load_instructions
from ..launch import Call, JobsError, Launcher, open_launcher
from ..tasks import AnyRecipe, Task, is_finished
from ..utils.files import write_text
from ..utils.shipped import find
from ..utils.slurm_options import SlurmArguments
from . import clock
from .arguments import HELD_OUT, StudyArguments
from .cluster import job_main, per_run, requeue_note, without_tokens
from .finish import finish_study, seeds_with
from .phases import Job, LLMRecipe, keeps_weights, required
from .plan import StudyPlan, plan
from .policy import run_all
from .probe import ProbeTimes
from .probe import probed as probe_times
from .record import EXITS, ROBUSTNESS, TRAIN, RunRecord, read_run_record
from .results import InstructionSet, StudyResults, StudyTimings, TrainedRuns
from .schedule import Estimate, choose_jobs, estimate, fitting, plan_lines

COMMAND = "study"


def run(
    args: StudyArguments,
    task: Task,
    constrained: AnyRecipe,
    erm: AnyRecipe,
    more: dict[str, AnyRecipe] | None = None,
    launcher: SlurmArguments | None = None,
) -> StudyResults | TrainedRuns:
    """The study's stages (`args.stage`); every input checked before the first run starts (`plan.plan`). `more`:
    the `--arm`s ({name: recipe}); `launcher`: where the runs go (`launch.open_launcher`: this process, a pool of
    device-pinned workers, or Slurm jobs). With `--stage train`, when no seed of every arm has been measured yet
    (`--time_budget`), or with jobs not waited for: the runs' folders and timings, and the runs still to do; else
    the study's results over the seeds every arm has."""
    started = clock.now()  # the time budget counts from here: preparing the data and the probe spend it too
    options = launcher or SlurmArguments()
    p = plan(args, task, constrained, erm, more or {}, options)
    where = open_launcher(options, p.request)
    records, timings, read = open_study(p, task)
    instructions = instruction_set(p, *read) if read is not None else None
    queue = jobs_left(p, task, records)
    check_trained(p, queue)
    drop_weights(p, records, queue)
    book = Bookkeeper(p.folder.root, records, timings, queue, p.processes.is_main_process, task.headline.key)
    if where.capabilities.at_once is None:  # every job starts at once, on devices of its own: exits need not wait
        queue = per_run(queue)
    if where.capabilities.detached:  # the calls are written into the folder, where no secret goes
        queue = [dataclasses.replace(job, recipe=without_tokens(job.recipe)) for job in queue]
    jobs, est, budget = scheduled(p, queue, book, started, where)
    out = run_all(queue, where.at_most(jobs), budget, est, book)
    if p.processes.num_processes > 1:  # the runs kept the process group for each other; the last is done with it
        p.processes.destroy_process_group()
    if out.left:
        names = ", ".join(j.name for j in out.left)
        print(f"not started (the time budget): {names}; the same command continues with them.")
    if out.unfollowed:
        print("not waiting for them (--wait false): the same command follows them and collects their results.")
    if out.failed:
        raise JobsError(
            f"{len(out.failed)} job(s) ended with their run unfinished: " + "; ".join(out.failed) + ". The same "
            "command submits them again; each goes on from its last recorded phase and checkpoint."
        )
    missing = [job.name for job in out.left + out.unfollowed]
    if p.evaluation is None or instructions is None or seeds_with(records, p.arms, ROBUSTNESS) == 0:
        folders = {arm: [p.folder.run(run) for run in p.runs if run.arm == arm] for arm in p.arms}
        return TrainedRuns(folders, timings, missing)
    return finish_study(p, p.evaluation, task, records, instructions, timings, missing)


def open_study(
    p: StudyPlan, task: Task
) -> tuple[dict[str, RunRecord], StudyTimings, tuple[list[dict[str, str]], InstructionSet] | None]:
    """The study folder's checks (`comparison.check_comparison_folder`), then its records and timings, each checked
    before anything is written (a refused record leaves the folder as it was), and the instructions read and checked
    (`instruction_rows`; None with `--stage train`); then the folder marked, by one writer. Under a launch every
    process checks the folder before any writes to it: a process that went on to train while another had not looked
    yet would have that one find the data it prepared, unmarked, and refuse."""
    p.folder.check_parts()
    settings = p.options.folder_settings(p.arms)
    folder = check_comparison_folder(p.folder.root, COMMAND, settings, "--study_dir", p.arms)
    key = task.headline.key
    records = {run.name: r for run in p.runs if (r := read_run_record(p.folder, run, key)) is not None}
    timings = StudyTimings.load(p.folder.root)
    read = instruction_rows(p) if p.evaluation is not None else None
    if p.processes.is_main_process:
        folder.mark()
        p.folder.identity(create=True)  # what every record it writes from now on carries
    p.processes.wait_for_everyone()  # every process has checked; a refusal came before it, on every process alike
    return records, timings, read


def instruction_rows(p: StudyPlan) -> tuple[list[dict[str, str]], InstructionSet]:
    """The instructions every model answers and how they were built, read (nothing written) and checked against
    every arm's starting model: room to decode them (`after_training.Evaluation.check_decoding`)."""
    o, script, evaluation = p.options, p.constrained.script, p.evaluation
    assert evaluation is not None
    if o.instructions != HELD_OUT:
        rows = load_instructions(o.instructions, o.max_instances)
        full = o.instructions == ALPACA_EVAL and len(rows) == ALPACA_EVAL_SIZE
        built = InstructionSet(o.instructions, len(rows), is_full_alpaca_eval=full)
    else:
        rows, counts = held_out_instructions(script, o.max_instances)
        built = InstructionSet(f"held-out first turns of {script.dataset_name}", **counts)
    checked: set[str] = set()
    for arm, recipe in p.arms.items():  # each starting model once, named by the first arm that starts from it
        if (path := str(recipe.model_config().model_name_or_path)) not in checked:
            checked.add(path)
            evaluation.check_decoding(ModelSpec(arm, path, flag="--model_name_or_path"), rows)
    return rows, built


def instruction_set(p: StudyPlan, rows: list[dict[str, str]], built: InstructionSet) -> InstructionSet:
    """`built`; where the study built the rows (the held-out first turns), written first, to the path the plan's
    evaluation reads."""
    if p.options.instructions == HELD_OUT:
        write_text(p.folder.instructions, "".join(json.dumps(r) + "\n" for r in rows))
    return built


def check_trained(p: StudyPlan, queue: list[Job]) -> None:
    """`--stage evaluate` refused while a run is not trained, naming them."""
    if p.options.stage == "evaluate" and (untrained := [j for j in queue if TRAIN in j.phases]):
        gone = [j.folder for j in untrained if j.restart]
        raise FileNotFoundError(
            f"`--stage evaluate`: runs not trained {[j.folder for j in untrained if not j.restart]}"
            + (f" and runs whose weights are gone with phases left {gone} (they train again)" if gone else "")
            + "; run `--stage train` (or `all`) first."
        )


@dataclasses.dataclass
class Bookkeeper:
    """What the study knows as its jobs end: each run's record and the phases' timings (saved by one writer,
    `writes`: the main process), and the estimate the plan then goes on from (`probed`: the probe's figures, where
    it ran). The launcher's side of a job: what it runs (`call`), and what its end means (`done`, `ended`)."""

    study_dir: str
    records: dict[str, RunRecord]
    timings: StudyTimings
    queue: list[Job]
    writes: bool
    key: str  # the task's headline metric (what a record is read with)
    probed: ProbeTimes | None = None

    @staticmethod
    def call(job: Job) -> Call:
        """A job as every launcher runs it (`study.cluster.job_main`): named by its run, its phases in the ledger."""
        return Call(job.run.name, job_main, (job,), note=requeue_note(job), about={"phases": list(job.phases)})

    def done(self, job: Job, done: RunRecord) -> Estimate | None:
        self.records[job.run.name] = done
        if done.requeues:
            self.timings.requeues[job.run.name] = list(done.requeues)
        for phase in job.phases:
            self.timings.add_phase(job.run.name, phase, done.seconds[phase], job.estimates.get(phase))
        self.save()
        took = sum(done.seconds[p] for p in job.phases)
        planned = sum(job.estimates.values())
        print(f"finished {job.name} in {took:.0f} s" + (f" (estimated {planned:.0f} s)" if job.estimates else ""))
        return estimate(self.records, self.probed, self.queue[0] if self.queue else None)

    def ended(self, job: Job, why: str) -> RunRecord | None:
        """A job that ended without its result (`launch.JobEnded`: failed, cancelled, out of time): its run's record,
        where it holds every phase of the job anyway (killed as it exited); else the phases it did record timed, and
        None."""
        record = read_run_record(job.study, job.run, self.key) or RunRecord(job.run.name)
        if all(record.done(p) for p in job.phases):
            return record
        for phase in job.phases:
            if record.done(phase):
                self.timings.add_phase(job.run.name, phase, record.seconds[phase], None)
        self.save()
        return None

    def save(self) -> None:
        if self.writes:  # one writer: ranks renaming the same temporary file over each other fail
            self.timings.save(self.study_dir)


def scheduled(
    p: StudyPlan, queue: list[Job], book: Bookkeeper, started: float, where: Launcher
) -> tuple[int, Estimate | None, float | None]:
    """(runs at once, the estimate, the seconds of budget left): with `--time_budget`, a queue the records cannot price
    probed first, and refused when no job fits; the plan printed."""
    minutes = p.options.time_budget
    budget = None if minutes is None else minutes * 60
    est = estimate(book.records, None, None)
    if budget is not None and queue and unpriced(est, queue):
        book.probed, book.timings.probe = probe_times(queue[0], book.timings.probe)
        book.save()
        est = estimate(book.records, book.probed, queue[0])
    spent = clock.now() - started
    if budget is not None:
        budget = max(budget - spent, 0.0)
    jobs = choose_jobs(queue, est, where.capabilities.at_once or max(1, len(queue)), budget, where.sharing)
    if budget is not None and queue and est is not None and not fitting(queue, est, jobs, budget, where.sharing):
        alone = est.total(queue[0], 1) / 60
        raise ValueError(
            f"`--time_budget` {minutes:g} min: no job can finish in it ({queue[0].name} alone is estimated at "
            f"{alone:.1f} min{', after ' + format(spent, '.0f') + ' s of preparation and probe' if spent >= 1 else ''}"
            f"); give `--time_budget` >= {math.ceil(alone + spent / 60)} (the study keeps what it prepared)."
        )
    if p.processes.is_main_process and (queue or budget is not None):
        done = len(p.runs) - len({j.run for j in queue})
        print("\n".join(plan_lines(queue, done, len(p.runs), est, jobs, budget, spent, where)))
    return jobs, est, budget


def drop_weights(p: StudyPlan, records: dict[str, RunRecord], queue: list[Job]) -> None:
    """Weights `--keep_models` no longer keeps, of runs whose phases are all recorded (a rerun of a finished study
    with `--keep_models none`): deleted, and said; a run with phases left keeps its weights until its last."""
    if p.evaluation is None:  # `--stage train` keeps every run's weights (`StudyArguments.validate`)
        return
    pending = {job.run for job in queue}
    for run in p.runs:
        folder, record = p.folder.run(run), records.get(run.name)
        if keeps_weights(p.options.keep_models, run) or run in pending or record is None or not has_weights(folder):
            continue
        if all(record.done(phase) for phase in required(p.evaluation, run) if phase != TRAIN):
            freed = delete_weights(folder)
            print(
                f"{run.name}: every phase recorded; its weights deleted (`--keep_models {p.options.keep_models}`), "
                f"{freed / 2**20:.0f} MiB freed"
            )


def data_processes(recipe: LLMRecipe, jobs: int) -> LLMRecipe:
    """The recipe with `dataset_num_proc` from the cores each of `jobs` runs gets, where it sets none (the data is
    tokenized once for the study, by whichever run comes first: `data.prepared_splits`)."""
    if recipe.training.dataset_num_proc is not None:
        return recipe
    procs = max(1, (os.cpu_count() or 1) // jobs)
    training = dataclasses.replace(recipe.training, dataset_num_proc=procs if procs > 1 else None)
    return dataclasses.replace(recipe, training=training)


def jobs_left(p: StudyPlan, task: Task, records: dict[str, RunRecord]) -> list[Job]:
    """Each run's phases still to do as jobs: the runs in seed-major order, then the seed-0 exit decodings. A run
    whose weights are gone with phases left restarts (`phases.start_over`); its record is dropped from `records`."""
    recipes = {arm: data_processes(recipe, p.options.jobs) for arm, recipe in p.arms.items()}
    main, exits = [], []
    for run in p.runs:
        phases = required(p.evaluation, run)
        record, folder = records.get(run.name), p.folder.run(run)
        left = [ph for ph in phases if not (record and record.done(ph)) and not (ph == TRAIN and is_finished(folder))]
        restart = any(ph != TRAIN for ph in left) and is_finished(folder) and not has_weights(folder)
        if restart:
            left = list(phases)
            records.pop(run.name, None)
        job = Job(
            p.folder,
            task.name,
            run,
            recipes[run.arm],
            p.evaluation,
            keep=p.options.keep_models,
            data_dir=p.folder.data,
            writes=p.processes.is_main_process,
            gpus=p.options.gpus_per_run,
            launch_config=find(p.options.accelerate_config or "ddp", "--accelerate_config", launch=True),
        )
        if main_phases := tuple(ph for ph in left if ph != EXITS):
            main.append(dataclasses.replace(job, phases=main_phases, restart=restart))
        if EXITS in left:
            exits.append(dataclasses.replace(job, phases=(EXITS,), restart=restart and not main_phases))
    return main + exits


def unpriced(est: Estimate | None, queue: list[Job]) -> bool:
    """Whether a phase of the queue has no figure yet (no finished phase of its kind, no probe)."""
    return est is None or any(est.phase(j.run.arm, ph, 1) == 0.0 for j in queue for ph in j.phases)
