"""
A study's settings resolved once, before any work (`plan`), as TRL's `scripts/sft.py` turns its dataclasses into
arguments once: the options checked, the arms and how they differ, the folder, the runs in order, the pairs compared,
what every run is measured with after it trains, the judge, and this launch's processes. Every step of the study
reads the plan; none is unset and none is filled again, and nothing is written to make it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..comparison import RunKey, compared_pairs, comparison_levels, study_arms
from ..config import training_level
from ..evaluation.alpaca import check_judge
from ..launch import Request
from ..launch import check as check_launcher
from ..tasks import AnyRecipe, SharedDataTraining, Task, output_dir
from ..trainers.setup import check_launch
from ..utils.slurm_options import SlurmArguments
from .after_training import Evaluation
from .arguments import HELD_OUT, StudyArguments
from .phases import LLMRecipe, is_llm_recipe
from .study_folder import StudyFolder

if TYPE_CHECKING:
    from accelerate import PartialState
    from transformers import TrainingArguments


@dataclass(frozen=True)
class StudyPlan:
    """What a study does, resolved from its options and recipes (`plan`)."""

    options: StudyArguments  # as given, `study_dir` filled (what study.json records)
    folder: StudyFolder
    arms: Mapping[str, LLMRecipe]  # {name: recipe}: constrained, its ERM twin, then the `--arm`s
    differences: tuple[str, ...]  # "field: a vs b" (or "arm: field: ...") where an arm's training differs
    runs: tuple[RunKey, ...]  # every arm x training seed, seed-major
    pairs: tuple[tuple[str, str], ...]  # (arm, reference arm) for every other arm, in the arms' order
    evaluation: Evaluation | None  # what every run is measured with after it trains; None: `--stage train`
    processes: PartialState  # this launch as accelerate holds it (`launch`)
    request: Request  # what the study asks of its launcher (`launch.open_launcher`)

    @property
    def constrained(self) -> LLMRecipe:
        return next(iter(self.arms.values()))


def plan(
    args: StudyArguments,
    task: Task,
    constrained: AnyRecipe,
    erm: AnyRecipe,
    more: Mapping[str, AnyRecipe],
    launcher: SlurmArguments | None = None,
) -> StudyPlan:
    """Everything checked before any work: the options, the task, the arms (`comparison.study_arms`), the launch
    (what the launcher `launcher` names can do: `launch.check`, and this machine's devices) and the judge (its
    credentials, model or encoder: before hours of training); then the settings resolved once, the caller's options
    left as given."""
    args.validate()
    refusal = f"`task: {task.name}` models do not answer instructions; the study compares LLM recipes."
    if not task.generates or not isinstance(task.training, SharedDataTraining):
        raise ValueError(refusal)
    given, differences = study_arms(constrained, erm, dict(more))
    arms = {name: r for name, r in given.items() if is_llm_recipe(r)}  # each of them, as the task says
    if len(arms) < len(given):
        raise ValueError(refusal)
    first = next(iter(arms.values()))
    processes = launch(first.training)
    study_dir = args.study_dir or f"{output_dir(first.training).rstrip('/')}-study"
    request = Request(study_dir, "--study_dir", args.jobs, args.gpus_per_run, "run")
    can = check_launcher(launcher or SlurmArguments(), request)
    can.check(jobs=args.jobs, time_budget=args.time_budget is not None, processes=processes.num_processes)
    if processes.num_processes > 1 and (args.stage != "train" or args.jobs > 1):
        raise ValueError(
            f"`--stage {args.stage}`{f' with `--jobs {args.jobs}`' if args.jobs > 1 else ''} under "
            f"{processes.num_processes} processes: training runs on every process (`accelerate launch ... study "
            "--stage train`), then evaluation, generation and judging in one process on one GPU (`constrained-sft "
            "study ... --stage evaluate`); --jobs runs several single-process runs at once, without a launcher."
        )
    options = dataclasses.replace(args, study_dir=study_dir)
    pairs = tuple(compared_pairs(list(arms), args.reference))
    evaluation = None
    if args.stage != "train":
        check_judge(options.judging(*pairs[0]))
        instructions = StudyFolder(study_dir).instructions if args.instructions == HELD_OUT else args.instructions
        evaluation = evaluation_settings(options, first, instructions)
    runs = tuple(RunKey(seed, arm) for seed in range(args.training_seeds) for arm in arms)
    return StudyPlan(
        options, StudyFolder(study_dir), arms, tuple(differences), runs, pairs, evaluation, processes, request
    )


def launch(training: TrainingArguments) -> PartialState:
    """This launch's processes as accelerate's `PartialState` holds them, set up as the runs' trainers set it up:
    `TrainingArguments` builds it from the recipe (`use_cpu`, `ddp_backend`, `ddp_timeout`, DeepSpeed) when the
    recipe is read, and each trainer builds it again from its own. Refused where accelerate would run the launched
    processes one by one (`trainers.setup.check_launch`)."""
    state = training.distributed_state
    if state is None:  # SageMaker model parallelism, which the study does not run under
        raise ValueError("the study needs accelerate's process state; SageMaker model parallelism is not supported.")
    check_launch(state)
    return state


def evaluation_settings(o: StudyArguments, recipe: LLMRecipe, instructions: str) -> Evaluation:
    """What every run is measured with right after it trains (`after_training.Evaluation`): the robustness grid
    (`comparison.comparison_levels`, with the curves' three levels: the ends and the one nearest the training
    level), the instructions at `instructions` and how they are answered, the exit-layer decoding."""
    t = recipe.training
    train_gamma = training_level(t.noise_gamma)
    gammas = comparison_levels(o.gammas, t.noise_gamma)
    curve = sorted({gammas[0], min(gammas, key=lambda g: abs(g - train_gamma)), gammas[-1]})
    return Evaluation(
        gammas=gammas,
        curve_gammas=curve,
        train_gamma=train_gamma,
        noise_seeds=o.noise_seeds,
        batch_size=t.per_device_eval_batch_size,
        max_length=t.max_length or 1024,
        instructions=instructions,
        max_instances=o.max_instances,
        generation_gammas=o.generation_gammas,
        generation_batch_size=o.generation_batch_size,
        max_new_tokens=o.max_new_tokens,
        exit_prompts=o.exit_prompts,
        exit_layers=o.exit_layers,
        exit_new_tokens=o.exit_new_tokens,
        compile_decoding=o.compile_decoding,
        bootstrap_samples=o.bootstrap_samples,
        sigma_x=t.noise_sigma,
    )
