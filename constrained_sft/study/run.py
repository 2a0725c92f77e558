"""
The paper's LLM comparison (Section 6) as one resumable run: a constrained recipe and its ERM twin, each trained with
seeds 0..N-1; every model's token accuracy and loss against the noise level with paired-bootstrap intervals over
training seeds and held-out sequences (`evaluation.run`); the models' answers to an instruction set generated with
noise at chosen levels (`evaluation.alpaca.generate`); constrained vs ERM judged head to head in both orders, seed s
against seed s (`evaluation.alpaca.judge_level`); and one report (`report`). Writes into `study_dir`:

    train/<arm>/seed<s>/   the trained models (a folder holding training_args.json is finished and reused)
    robustness/            `eval robustness` of all 2N models (reused when its models and levels are unchanged)
    instructions.jsonl     the instruction set (held-out first turns with their reference answers, by default)
    generations/<arm>-seed<s>/gamma_<g>.json, judging/gamma_<g>/verdicts-<s>.json
    study.json, timings.json, report.html, report.md
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

from ..config import training_level
from ..constraints import mode_of
from ..data.instructions import held_out_instructions
from ..evaluation import RobustnessArguments, RobustnessResults, saved_results
from ..evaluation import run as robustness
from ..evaluation.alpaca import AlpacaArguments, build_judge, check_judge, judge_levels
from ..evaluation.alpaca.generate import GenerateArguments
from ..evaluation.alpaca.generate import run as generate
from ..evaluation.exits import ExitsArguments
from ..evaluation.exits import run as run_exits
from ..evaluation.folders import check_folder, mark_folder
from ..evaluation.instructions import ALPACA_EVAL, ALPACA_EVAL_SIZE, load_instructions
from ..evaluation.loading import versions
from ..evaluation.results import ExitsResults, HeadToHead
from ..noise import NoiseGrid
from ..tasks import Recipe, is_finished
from ..tasks.arms import twin_differences
from ..utils.files import write_json, write_text
from ..utils.folders import child_path
from .arguments import HELD_OUT, StudyArguments
from .report import write_study_report
from .results import (
    STUDY_JSON,
    InstructionSet,
    StudyBudget,
    StudyResults,
    StudyRobustness,
    StudySettings,
    StudyTimings,
    TrainedRuns,
    judging_dir,
)

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


def run_dir(study_dir: str, arm: str, seed: int) -> str:
    return child_path(study_dir, "train", arm, f"seed{seed}")


def add_time(timings: dict, key: str, start: float) -> None:
    """Add the seconds since `start` to `timings[key]`: a stage's wall time summed over the invocations that did its
    work, so a resumed study keeps what its earlier invocations spent (a reused result adds next to nothing)."""
    timings[key] = round(timings.get(key, 0.0) + time.perf_counter() - start, 1)


def train_runs(args: StudyArguments, task, recipes: dict[str, Recipe], timings: dict) -> dict[str, list[str]]:
    """Every arm x seed trained into its folder (finished folders kept); {arm: [folder per seed]}."""
    folders = {arm: [run_dir(args.study_dir, arm, s) for s in range(args.training_seeds)] for arm in recipes}
    for seed in range(args.training_seeds):  # seed-major: a study stopped early still has comparable pairs
        for arm in recipes:
            folder = folders[arm][seed]
            if is_finished(folder):
                continue
            checkpoints = os.path.isdir(folder) and any(f.startswith("checkpoint-") for f in os.listdir(folder))
            training = dataclasses.replace(
                recipes[arm].training,
                output_dir=folder,
                seed=seed,
                resume_from_checkpoint=True if checkpoints else None,
            )
            start = time.perf_counter()
            task.training.train(Recipe(recipes[arm].script, recipes[arm].model, training), more_runs=True)
            add_time(timings["train"], f"{arm}/seed{seed}", start)
            if is_main_process():  # one writer: ranks renaming the same temporary file over each other fail
                write_json(os.path.join(args.study_dir, "timings.json"), timings)
    if world_size() > 1:  # the runs kept the process group for each other; the last one is done with it
        from accelerate import PartialState

        PartialState().destroy_process_group()
    return folders


def world_size() -> int:
    """Processes of this launch (`accelerate launch` / torchrun set WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0 of this launch, or the only process (`accelerate launch` / torchrun set RANK)."""
    return int(os.environ.get("RANK", "0")) == 0


def measure(args: StudyArguments, task, recipe: Recipe, folders: dict[str, list[str]]) -> RobustnessResults:
    """`eval robustness` of every model, arms paired by seed; a finished evaluation of the same models, levels and
    noise seeds is reused (its intervals recomputed), so a resumed study does not evaluate again."""
    train_gamma = training_level(recipe.training.noise_gamma)
    gammas = (NoiseGrid.parse(args.gammas) if args.gammas else NoiseGrid.default(train_gamma)).sorted().to_list()
    arms = {arm: [(f"{arm}/seed{s}", p) for s, p in enumerate(paths)] for arm, paths in folders.items()}
    out, pairs = os.path.join(args.study_dir, "robustness"), compared(args, list(folders))
    if saved := saved_results(out, arms, gammas, args.noise_seeds, task, pairs, args.bootstrap_samples):
        return saved
    settings = RobustnessArguments(
        task=task.name,
        output_dir=out,
        gammas=gammas,
        train_gamma=train_gamma,
        seeds=args.noise_seeds,
        batch_size=recipe.training.per_device_eval_batch_size,
        max_length=recipe.training.max_length or 1024,
        bootstrap_samples=args.bootstrap_samples,
    )
    return robustness(settings, recipe.script, arms=arms, pairs=pairs, claim=False)  # the study owns the folder


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


def answer(args: StudyArguments, path: str, folders: dict[str, list[str]], sigma: float) -> str:
    """Every model's answers at every generation level, one noise draw shared by all (same seed, same sigma_x)."""
    out = os.path.join(args.study_dir, "generations")
    for seed in range(args.training_seeds):
        for arm in folders:
            generate(
                GenerateArguments(
                    model=folders[arm][seed],
                    name=f"{arm}-seed{seed}",
                    output_dir=out,
                    instructions=path,
                    max_instances=args.max_instances,
                    gammas=args.generation_gammas,
                    sigma_x=sigma,
                    batch_size=args.generation_batch_size,
                    max_new_tokens=args.max_new_tokens,
                )
            )
    return out


def compared(args: StudyArguments, arms: list[str]) -> list[tuple[str, str]]:
    """(arm, reference) for every other arm, in the arms' order (constrained first unless it is the reference)."""
    return [(arm, args.reference) for arm in arms if arm != args.reference]


def early_exits(args: StudyArguments, path: str, folders: dict[str, list[str]], sigma: float) -> ExitsResults | None:
    """`eval exits` of each arm's seed-0 model on the first `exit_prompts` instructions (None with 0); a finished
    run of the same settings in `<study_dir>/exits` is reused."""
    if not args.exit_prompts:
        return None
    settings = ExitsArguments(
        models=[paths[0] for paths in folders.values()], names=list(folders), output_dir=os.path.join(args.study_dir,
        "exits"), exit_layers=args.exit_layers, instructions=path, max_instances=args.exit_prompts,
        max_new_tokens=args.exit_new_tokens, gammas=sorted(set(args.generation_gammas)), sigma_x=sigma,
        bootstrap_samples=args.bootstrap_samples,
    )  # fmt: skip
    done = ExitsResults.load(settings.output_dir)
    if done is not None:
        wanted = {k: v for k, v in dataclasses.asdict(settings).items() if k != "bf16"}
        if all(getattr(done.settings, k) == v for k, v in wanted.items()):
            return done
    return run_exits(settings)


def judge_arguments(args: StudyArguments, model: str = "constrained", reference: str = "erm") -> AlpacaArguments:
    """The study's judge as `eval alpaca` takes it: `model`'s answers judged against `reference`'s."""
    return AlpacaArguments(
        model=model,
        reference=reference,
        judge=args.judge,
        judge_model=args.judge_model,
        judge_batch_size=args.judge_batch_size,
        bootstrap_samples=args.bootstrap_samples,
    )


def head_to_head(
    args: StudyArguments, generations: str, full_set: bool, model: str = "constrained", reference: str = "erm"
) -> HeadToHead:
    """`model` seed s vs `reference` seed s at each generation level, both orders, win rate with its interval. The
    first pair judges into `judging/`, every other into `judging/<model>-vs-<reference>/`."""

    def rows(arm: str, seed: int, gamma: float) -> list[dict]:
        with open(os.path.join(generations, f"{arm}-seed{seed}", f"gamma_{float(gamma)}.json")) as f:
            return json.load(f)

    pairs = {
        gamma: [(rows(model, s, gamma), rows(reference, s, gamma)) for s in range(args.training_seeds)]
        for gamma in args.generation_gammas
    }
    root = judging_dir(args.study_dir, model, reference)
    judging = judge_arguments(args, model, reference)
    return judge_levels(
        build_judge(judging, os.path.join(root, "annotations_cache.json")), pairs, root, judging, full_set
    )


def run(
    args: StudyArguments, task, constrained: Recipe, erm: Recipe, more: dict[str, Recipe] | None = None
) -> StudyResults | TrainedRuns:
    """The study's stages (`args.stage`); every input checked before the first run starts. `more`: the `--arm`s
    ({name: recipe}). With `--stage train`: the trained run folders and their timings; else the study's results."""
    recipes = {"constrained": constrained, "erm": erm, **(more or {})}
    check(args, task, recipes)
    if world_size() > 1 and args.stage != "train":
        raise ValueError(
            f"`--stage {args.stage}` under {world_size()} processes: training runs on every process "
            "(`accelerate launch ... study --stage train`), then evaluation, generation and judging in one process "
            "on one GPU (`constrained-sft study ... --stage evaluate`)."
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
    timings = {"train": {}}
    if os.path.isfile(timings_path):
        with open(timings_path) as f:
            timings = json.load(f)
    folders = train_runs(args, task, recipes, timings)
    if args.stage == "train":
        return TrainedRuns(folders, StudyTimings.from_dict(timings))
    if missing := [p for members in folders.values() for p in members if not is_finished(p)]:
        raise FileNotFoundError(f"unfinished training runs {missing}; run `--stage train` (or `all`) first.")

    def timed(name, fn, *a):
        start = time.perf_counter()
        value = fn(*a)
        add_time(timings, name, start)
        write_json(timings_path, timings)
        return value

    results = timed("robustness", measure, args, task, constrained, folders)
    path, instructions = instruction_set(args, constrained)
    generations = timed("generation", answer, args, path, folders, results.settings.sigma_x)
    full_set = bool(instructions.is_full_alpaca_eval)
    pairs = compared(args, list(recipes))
    judged = {arm: timed("judging", head_to_head, args, generations, full_set, arm, ref) for arm, ref in pairs}
    exits = timed("exits", early_exits, args, path, folders, results.settings.sigma_x)
    study = StudyResults(
        settings=StudySettings(
            study=args,
            constrained_recipe=constrained.training.to_dict(),
            twin_differences=differences,
            instructions=instructions,
            budget=budget(constrained, args, results),
        ),
        versions=versions("torch", "transformers", "trl", "alpaca_eval"),
        robustness=StudyRobustness.of(results),
        head_to_head=judged[pairs[0][0]],
        more_head_to_heads={arm: result for arm, result in judged.items() if arm != pairs[0][0]},
        exits=exits,
        timings=StudyTimings.from_dict(timings),
    )
    study.files = write_study_report(study, args.study_dir, args.examples)
    write_json(os.path.join(args.study_dir, STUDY_JSON), study.to_dict())
    return study


def budget(recipe: Recipe, args: StudyArguments, results: RobustnessResults) -> StudyBudget:
    """What the study spent: the numbers that bound what it can resolve."""
    t = recipe.training
    return StudyBudget(
        training_seeds_per_arm=args.training_seeds,
        max_steps=t.max_steps,
        batch=t.per_device_train_batch_size * t.gradient_accumulation_steps,
        max_length=t.max_length,
        held_out_sequences=results.settings.held_out_rows,
        noise_seeds=args.noise_seeds,
        generation_gammas=args.generation_gammas,
        max_new_tokens=args.max_new_tokens,
    )
