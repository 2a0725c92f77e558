"""
The paper's LLM comparison (Section 6) as one resumable run: a constrained recipe and its ERM twin (and any
`--arm`), each trained with seeds 0..N-1, seed-major, one run at a time or `--jobs` at once (`schedule`); right after
it trains, each run is measured (token accuracy and loss against the noise level), answers the instructions at the
generation levels and, for seed 0, decodes self-speculatively (`runs`); then, from these records alone, the arms
compared with paired-bootstrap intervals over training seeds and held-out sequences, each arm's answers judged
against the reference arm's in both orders, seed s against seed s, and one report (`finish`). Writes into
`study_dir`:

    train/<arm>/seed<s>/   the trained runs (`--keep_models`: whose weights stay once recorded)
    runs/<arm>-seed<s>.json  each run's measurements and timings: a run with a record is done
    robustness/            the comparisons over every recorded run (results.json, report.html)
    instructions.jsonl     the instruction set (held-out first turns with their reference answers, by default)
    generations/<arm>-seed<s>/gamma_<g>.json, judging/gamma_<g>/verdicts-<s>.json, exits/
    study.json, timings.json, report.html, report.md
"""

from __future__ import annotations

import json
import os

from ..config import training_level
from ..constraints import mode_of
from ..data.instructions import held_out_instructions
from ..evaluation.alpaca import check_judge
from ..evaluation.folders import check_folder, mark_folder
from ..evaluation.instructions import ALPACA_EVAL, ALPACA_EVAL_SIZE, load_instructions
from ..noise import NoiseGrid
from ..tasks import Recipe, is_finished
from ..tasks.arms import twin_differences
from ..utils.files import read_json, write_json, write_text
from .arguments import HELD_OUT, StudyArguments
from .finish import compared, finish_study, judge_arguments
from .results import InstructionSet, StudyResults, StudyTimings, TrainedRuns
from .runs import Evaluation, Job, RunRecord, read_record, run_dir
from .schedule import from_records, plan_lines, probe, run_all

COMMAND = "study"


def check(args: StudyArguments, task, recipes: dict[str, Recipe]) -> None:
    """Everything checked before any work: the options, the task, which arm is constrained."""
    args.validate()
    if not task.generates:
        raise ValueError(f"`task: {task.name}` models do not answer instructions; the study compares LLM recipes.")
    if not mode_of(recipes["constrained"].training.constraints).trains_layers:
        raise ValueError(
            "--config has `constraints: none`; give the constrained recipe (its ERM twin is --erm_config)."
        )
    if mode_of(recipes["erm"].training.constraints).trains_layers:
        raise ValueError(
            f"--erm_config has `constraints: {recipes['erm'].training.constraints}`; the ERM twin needs "
            "`constraints: none`."
        )
    for arm in list(recipes)[2:]:  # `--arm`s: the same data and model as the constrained recipe
        try:
            twin_differences(recipes["constrained"], recipes[arm], same_noise=False)
        except ValueError as error:
            raise ValueError(
                f"`--arm {arm}`: {error}".replace("--config and --erm_config", "it and --config")
            ) from None


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
    path = os.path.join(args.study_dir, "instructions.jsonl")
    write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
    return path, InstructionSet(f"held-out first turns of {recipe.script.dataset_name}", **counts)


def run(
    args: StudyArguments, task, constrained: Recipe, erm: Recipe, more: dict[str, Recipe] | None = None
) -> StudyResults | TrainedRuns:
    """The study's stages (`args.stage`); every input checked before the first run starts. `more`: the `--arm`s
    ({name: recipe}). With `--stage train`, or when no seed of every arm has finished yet (`--time_budget`): the
    runs' folders and timings, and the runs still to do; else the study's results over the seeds every arm finished."""
    recipes = {"constrained": constrained, "erm": erm, **(more or {})}
    check(args, task, recipes)
    if world_size() > 1 and (args.stage != "train" or args.jobs > 1):
        raise ValueError(
            f"`--stage {args.stage}`{f' with `--jobs {args.jobs}`' if args.jobs > 1 else ''} under {world_size()} "
            "processes: training runs on every process (`accelerate launch ... study --stage train`), then "
            "evaluation, generation and judging in one process on one GPU (`constrained-sft study ... --stage "
            "evaluate`); --jobs runs several single-process runs at once, without a launcher."
        )
    differences = twin_differences(constrained, erm)
    differences += [f"{arm}: {d}" for arm, r in (more or {}).items() for d in twin_differences(constrained, r, False)]
    if args.stage != "train":
        check_judge(
            judge_arguments(args, *compared(args, list(recipes))[0])
        )  # credentials, judge model or encoder: before hours of training
    args.study_dir = args.study_dir or f"{constrained.training.output_dir.rstrip('/')}-study"
    settings = args.folder_settings(recipes)
    check_folder(args.study_dir, COMMAND, settings, "--study_dir")  # a folder of another study: before any run
    if is_main_process():  # one writer
        mark_folder(args.study_dir, COMMAND, settings)
    timings_path = os.path.join(args.study_dir, "timings.json")
    timings = read_json(timings_path, "--study_dir") if os.path.isfile(timings_path) else {"train": {}}
    evaluation, instructions = None, None
    if args.stage != "train":
        path, instructions = instruction_set(args, constrained)
        evaluation = evaluation_settings(args, task, constrained, path)
    jobs = [Job(args.study_dir, task.name, arm, seed, recipes[arm], evaluation, args.keep_models)
            for seed in range(args.training_seeds) for arm in recipes]  # seed-major: a cut study has whole seeds  # fmt: skip
    key = task.headline.key
    records = {
        job.name: r for job in jobs if evaluation and (r := read_record(args.study_dir, job.arm, job.seed, key))
    }
    pending = [job for job in jobs if job.name not in records and (evaluation or not is_finished(job.folder))]
    if args.stage == "evaluate" and (untrained := [job.folder for job in pending if not is_finished(job.folder)]):
        raise FileNotFoundError(f"unfinished training runs {untrained}; run `--stage train` (or `all`) first.")

    def on_done(job: Job, record: dict):
        timings["train"][job.name] = record["seconds"]["train"]
        for stage in ("robustness", "generation", "exits"):
            if stage in record["seconds"]:
                timings[stage] = round(timings.get(stage, 0.0) + record["seconds"][stage], 1)
        if evaluation is not None:
            records[job.name] = RunRecord.from_dict(record, key)
        if is_main_process():  # one writer: ranks renaming the same temporary file over each other fail
            write_json(timings_path, timings)
        print(f"finished {job.name} in {record['seconds'].get('total', record['seconds']['train']):.0f} s")
        return from_records(records)

    budget = None if args.time_budget is None else args.time_budget * 60
    estimate = from_records(records)
    if budget is not None and estimate is None and pending:
        estimate = probe(pending[0], args.jobs)
    if is_main_process() and (pending or budget is not None):
        print("\n".join(plan_lines(pending, len(jobs) - len(pending), estimate, args.jobs, budget)))
    left = run_all(pending, args.jobs, budget, estimate, on_done)
    if world_size() > 1:  # the runs kept the process group for each other; the last one is done with it
        from accelerate import PartialState

        PartialState().destroy_process_group()
    folders = {arm: [run_dir(args.study_dir, arm, s) for s in range(args.training_seeds)] for arm in recipes}
    missing = [job.name for job in left]
    if left:
        print(f"not started (the time budget): {', '.join(missing)}; the same command continues with them.")
    seeds = next((s for s in range(args.training_seeds) if any(f"{a}/seed{s}" not in records for a in recipes)),
                 args.training_seeds)  # fmt: skip
    if evaluation is None or seeds == 0:
        return TrainedRuns(folders, StudyTimings.from_dict(timings), missing)
    return finish_study(args, task, recipes, records, seeds, evaluation, instructions, differences, timings, missing)


def evaluation_settings(args: StudyArguments, task, recipe: Recipe, instructions: str) -> Evaluation:
    """What every run is measured with right after it trains (`runs.Evaluation`)."""
    train_gamma = training_level(recipe.training.noise_gamma)
    gammas = (NoiseGrid.parse(args.gammas) if args.gammas else NoiseGrid.default(train_gamma)).sorted()
    curve = sorted({gammas[0], min(gammas, key=lambda g: abs(g - train_gamma)), gammas[-1]})
    return Evaluation(
        gammas=gammas.to_list(), curve_gammas=curve, train_gamma=train_gamma, noise_seeds=args.noise_seeds,
        batch_size=recipe.training.per_device_eval_batch_size, max_length=recipe.training.max_length or 1024,
        instructions=instructions, max_instances=args.max_instances, generation_gammas=args.generation_gammas,
        generation_batch_size=args.generation_batch_size, max_new_tokens=args.max_new_tokens,
        exit_prompts=args.exit_prompts, exit_layers=args.exit_layers, exit_new_tokens=args.exit_new_tokens,
        bootstrap_samples=args.bootstrap_samples, sigma_x=recipe.training.noise_sigma,
    )  # fmt: skip
