"""
What a study reports, made from its runs' records alone (`record.RunRecord`: no weights needed): the robustness
comparisons over the training seeds every arm has finished, each arm's answers judged against the reference arm's,
the seed-0 exit-layer decoding, the report and study.json.
"""

from __future__ import annotations

import json
import time

from ..comparison import CONSTRAINED, ERM, RunKey
from ..evaluation import HeadToHead, RobustnessResults
from ..evaluation.alpaca import AlpacaArguments, build_judge, judge_levels
from ..evaluation.exits import write_exits
from ..evaluation.loading import versions
from ..evaluation.robustness import finish
from ..tasks import Recipe, Task
from ..utils.files import write_json
from .after_training import Evaluation, held_out
from .arguments import StudyArguments
from .phases import required
from .probe import optimizer_steps
from .record import ANSWERS, ROBUSTNESS, TRAIN, RunRecord
from .report import write_study_report
from .results import (
    InstructionSet,
    StudyBudget,
    StudyResults,
    StudyRobustness,
    StudySettings,
    StudyTimings,
)

SIGMA_TOLERANCE = 1e-2  # relative: the runs' recorded scales agree up to the precision they were measured in


def one_scale(records: dict[str, RunRecord]) -> float | None:
    """The scale sigma_x every run was measured with; runs that recorded scales further apart than their precision
    are refused (one comparison, one scale)."""
    scales = {name: r.sigma_x for name, r in records.items()}
    values = [v for v in scales.values() if v is not None]
    if values and (max(values) - min(values)) > SIGMA_TOLERANCE * max(abs(v) for v in values):
        raise ValueError(
            f"the runs were measured at different noise scales sigma_x {scales}: their recipes start from different "
            "models or set different `noise_sigma`; give every arm the same base model and `noise_sigma`."
        )
    return next(iter(scales.values()))


def compared(args: StudyArguments, arms: list[str]) -> list[tuple[str, str]]:
    """(arm, reference) for every other arm, in the arms' order (constrained first unless it is the reference)."""
    return [(arm, args.reference) for arm in arms if arm != args.reference]


def judge_arguments(args: StudyArguments, model: str = CONSTRAINED, reference: str = ERM) -> AlpacaArguments:
    """The study's judge as `eval alpaca` takes it: `model`'s answers judged against `reference`'s."""
    return AlpacaArguments(
        model=model,
        reference=reference,
        judge=args.judge,
        judge_model=args.judge_model,
        judge_batch_size=args.judge_batch_size,
        judge_base_url=args.judge_base_url,
        judge_timeout=args.judge_timeout,
        bootstrap_samples=args.bootstrap_samples,
    )


def head_to_head(
    args: StudyArguments, seeds: int, full_set: bool, model: str = CONSTRAINED, reference: str = ERM
) -> HeadToHead:
    """`model` seed s vs `reference` seed s (s < `seeds`) at each generation level, both orders, win rate with its
    interval. The first pair judges into `judging/`, every other into `judging/<model>-vs-<reference>/`."""

    def rows(arm: str, seed: int, gamma: float) -> list[dict]:
        with open(args.folder.answers(RunKey(seed, arm), gamma)) as f:
            return json.load(f)

    pairs = {
        gamma: [(rows(model, s, gamma), rows(reference, s, gamma)) for s in range(seeds)]
        for gamma in args.generation_gammas
    }
    root = args.folder.judging(model, reference)
    judging = judge_arguments(args, model, reference)
    return judge_levels(build_judge(judging, root), pairs, root, judging, full_set)


def budget(
    recipe: Recipe, args: StudyArguments, results: RobustnessResults, seeds: int, judged: int, missing, timings=None
) -> StudyBudget:
    """What the study spent: the numbers that bound what it can resolve (`seeds`: the training seeds every arm has
    measured; `judged`: those every arm has answered; `missing`: the runs, or runs' phases, still to do; `timings`:
    the probe's count of a pass's steps, for a recipe that trains by passes)."""
    t = recipe.training
    epoch_steps = ((timings.probe if timings is not None else None) or {}).get("times", {}).get("epoch_steps", 0)
    return StudyBudget(
        training_seeds_per_arm=seeds,
        max_steps=optimizer_steps(t, epoch_steps or 0) or t.max_steps,
        batch=t.per_device_train_batch_size * t.gradient_accumulation_steps,
        max_length=t.max_length,
        held_out_sequences=results.settings.held_out_rows,
        noise_seeds=args.noise_seeds,
        generation_gammas=args.generation_gammas,
        max_new_tokens=args.max_new_tokens,
        runs_missing=list(missing),
        judged_seeds_per_arm=judged if judged != seeds else None,
    )


def seeds_with(records: dict[str, RunRecord], arms, phase: str) -> int:
    """How many seeds, from 0, every arm has recorded `phase` for."""
    seed = 0
    while all((r := records.get(RunKey(seed, arm).name)) is not None and r.done(phase) for arm in arms):
        seed += 1
    return seed


def phases_missing(
    records: dict[str, RunRecord], recipes, e: Evaluation, seeds: int, not_started: list[str]
) -> list[str]:
    """Every run's phases not recorded yet, as the report names them ("erm/seed1" for a whole run, else
    "erm/seed0: exits"), the jobs this call did not start first."""
    out = []
    for seed in range(seeds):
        for arm in recipes:
            run = RunKey(seed, arm)
            record = records.get(run.name)
            left = [p for p in required(e, run) if not (record and record.done(p)) and p != TRAIN]
            if left:
                out.append(run.name if record is None or not record.seconds else f"{run.name}: {', '.join(left)}")
    return sorted(set(out), key=lambda name: (name not in not_started, name))


def finish_study(
    args: StudyArguments,
    task: Task,
    recipes: dict[str, Recipe],
    records: dict[str, RunRecord],
    evaluation: Evaluation,
    instructions: InstructionSet,
    differences: list[str],
    timings: StudyTimings,
    not_started: list[str],
) -> StudyResults:
    """The study from the runs' records ({"<arm>/seed<s>": record}): robustness over the seeds every arm has
    measured, the head-to-heads over those every arm has answered (none yet: no head-to-head), the exit-layer
    decoding of each arm whose seed 0 has one; what is missing is named."""
    constrained = recipes[CONSTRAINED]
    seeds, judged = seeds_with(records, recipes, ROBUSTNESS), seeds_with(records, recipes, ANSWERS)
    arms = {arm: [RunKey(s, arm).name for s in range(seeds)] for arm in recipes}
    kept = {name: records[name] for names in arms.values() for name in names}
    sigma = one_scale(kept)
    e = evaluation
    data = held_out(task, constrained.script, args.folder.data)  # the rows the runs measured
    m = e.measurement(
        task, data, constrained.script, sigma, "the runs' recorded noise_sigma_x (their starting model's)"
    )
    # every kept run has its measurement (`seeds_with` counts the seeds whose every arm has one)
    measured = {name: result for name, r in kept.items() if (result := r.robustness) is not None}
    units = next(iter(next(iter(measured.values())).scores.values()))
    results = m.results(arms, args.bootstrap_samples, len(next(iter(units.values()))))
    results.models = measured
    pairs = compared(args, list(recipes))
    results = finish(results, task, pairs, args.folder.robustness)
    start = time.perf_counter()
    full_set = bool(instructions.is_full_alpaca_eval)
    judged_pairs = {arm: head_to_head(args, judged, full_set, arm, ref) for arm, ref in pairs} if judged else {}
    if judged_pairs:
        timings.add_stage("judging", time.perf_counter() - start)
    timings.save(args.folder.root)
    exits = None
    decoded = {
        arm: x for arm in recipes if (r := records.get(RunKey(0, arm).name)) is not None and (x := r.exits) is not None
    }
    if e.exit_prompts and decoded:
        folders = [args.folder.run(RunKey(0, arm)) for arm in decoded]
        exit_args = e.exits_arguments(args.folder.exits, folders, list(decoded), sigma)
        exits = write_exits(exit_args, args.folder.exits, decoded, e.exit_rows(), sigma, "cuda" if _cuda() else "cpu")
    missing = phases_missing(records, recipes, e, args.training_seeds, not_started)
    study = StudyResults(
        settings=StudySettings(
            study=args,
            constrained_recipe=constrained.training.to_dict(),
            twin_differences=differences,
            instructions=instructions,
            budget=budget(constrained, args, results, seeds, judged, missing, timings),
        ),
        versions=versions("torch", "transformers", "trl", "alpaca_eval"),
        robustness=StudyRobustness.of(results),
        head_to_head=judged_pairs.get(pairs[0][0]),
        more_head_to_heads={arm: result for arm, result in judged_pairs.items() if arm != pairs[0][0]},
        exits=exits,
        timings=timings,
    )
    study.files = write_study_report(study, args.folder, args.examples)
    write_json(args.folder.study_json, study.to_dict())
    return study


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
