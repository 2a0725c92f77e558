"""
What a study reports, made from its runs' records alone (`record.RunRecord`: no weights needed): the robustness
comparisons over the training seeds every arm has finished, each arm's answers judged against the reference arm's,
the seed-0 exit-layer decoding, the report and study.json.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping

from ..comparison import RunKey
from ..evaluation import HeadToHead, RobustnessResults
from ..evaluation.alpaca import build_judge, judge_levels
from ..evaluation.exits import write_exits
from ..evaluation.loading import versions
from ..evaluation.robustness import finish
from ..tasks import Task
from ..utils.files import write_json
from ..utils.types import JSONRead
from .after_training import Evaluation, held_out
from .phases import required
from .plan import StudyPlan
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


def head_to_head(p: StudyPlan, seeds: int, full_set: bool, model: str, reference: str) -> HeadToHead:
    """`model` seed s vs `reference` seed s (s < `seeds`) at each generation level, both orders, win rate with its
    interval. The first pair judges into `judging/`, every other into `judging/<model>-vs-<reference>/`."""

    def rows(arm: str, seed: int, gamma: float) -> list[JSONRead]:
        with open(p.folder.answers(RunKey(seed, arm), gamma)) as f:
            answers: list[JSONRead] = json.load(f)
        return answers

    pairs = {
        gamma: [(rows(model, s, gamma), rows(reference, s, gamma)) for s in range(seeds)]
        for gamma in p.options.generation_gammas
    }
    root = p.folder.judging(model, reference)
    judging = p.options.judging(model, reference)
    return judge_levels(build_judge(judging, root), pairs, root, judging, full_set)


def budget(
    p: StudyPlan, results: RobustnessResults, seeds: int, judged: int, missing: list[str], timings: StudyTimings
) -> StudyBudget:
    """What the study spent: the numbers that bound what it can resolve (`seeds`: the training seeds every arm has
    measured; `judged`: those every arm has answered; `missing`: the runs, or runs' phases, still to do; `timings`:
    the probe's count of a pass's steps, for a recipe that trains by passes)."""
    t, o = p.constrained.training, p.options
    epoch_steps = (timings.probe or {}).get("times", {}).get("epoch_steps", 0)
    return StudyBudget(
        training_seeds_per_arm=seeds,
        max_steps=optimizer_steps(t, epoch_steps or 0) or t.max_steps,
        batch=t.per_device_train_batch_size * t.gradient_accumulation_steps,
        max_length=t.max_length,
        held_out_sequences=results.settings.held_out_rows,
        noise_seeds=o.noise_seeds,
        generation_gammas=o.generation_gammas,
        max_new_tokens=o.max_new_tokens,
        runs_missing=list(missing),
        judged_seeds_per_arm=judged if judged != seeds else None,
    )


def seeds_with(records: dict[str, RunRecord], arms: Iterable[str], phase: str) -> int:
    """How many seeds, from 0, every arm has recorded `phase` for."""
    seed = 0
    while all((r := records.get(RunKey(seed, arm).name)) is not None and r.done(phase) for arm in arms):
        seed += 1
    return seed


def phases_missing(
    records: dict[str, RunRecord], recipes: Mapping[str, object], e: Evaluation, seeds: int, not_started: list[str]
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
    p: StudyPlan,
    e: Evaluation,
    task: Task,
    records: dict[str, RunRecord],
    instructions: InstructionSet,
    timings: StudyTimings,
    not_started: list[str],
) -> StudyResults:
    """The study from the runs' records ({"<arm>/seed<s>": record}): robustness over the seeds every arm has
    measured, the head-to-heads over those every arm has answered (none yet: no head-to-head), the exit-layer
    decoding of each arm whose seed 0 has one; what is missing is named."""
    constrained = p.constrained
    seeds, judged = seeds_with(records, p.arms, ROBUSTNESS), seeds_with(records, p.arms, ANSWERS)
    arms = {arm: [RunKey(s, arm).name for s in range(seeds)] for arm in p.arms}
    kept = {name: records[name] for names in arms.values() for name in names}
    sigma = one_scale(kept)
    data = held_out(task, constrained.script, p.folder.data)  # the rows the runs measured
    m = e.measurement(
        task, data, constrained.script, sigma, "the runs' recorded noise_sigma_x (their starting model's)"
    )
    # every kept run has its measurement (`seeds_with` counts the seeds whose every arm has one)
    measured = {name: result for name, r in kept.items() if (result := r.robustness) is not None}
    units = next(iter(next(iter(measured.values())).scores.values()))
    results = m.results(arms, p.options.bootstrap_samples, len(next(iter(units.values()))))
    results.models = measured
    results = finish(results, task, list(p.pairs), p.folder.robustness)
    start = time.perf_counter()
    full_set = bool(instructions.is_full_alpaca_eval)
    judged_pairs = {arm: head_to_head(p, judged, full_set, arm, ref) for arm, ref in p.pairs} if judged else {}
    if judged_pairs:
        timings.add_stage("judging", time.perf_counter() - start)
    timings.save(p.folder.root)
    exits = None
    decoded = {
        arm: x for arm in p.arms if (r := records.get(RunKey(0, arm).name)) is not None and (x := r.exits) is not None
    }
    if e.exit_prompts and decoded:
        folders = [p.folder.run(RunKey(0, arm)) for arm in decoded]
        exit_args = e.exits_arguments(p.folder.exits, folders, list(decoded), sigma)
        exits = write_exits(exit_args, p.folder.exits, decoded, e.exit_rows(), sigma, "cuda" if _cuda() else "cpu")
    missing = phases_missing(records, p.arms, e, p.options.training_seeds, not_started)
    first = p.pairs[0][0]
    study = StudyResults(
        settings=StudySettings(
            study=p.options,
            constrained_recipe=constrained.training.to_dict(),  # type: ignore[no-untyped-call]  # transformers'
            twin_differences=list(p.differences),
            instructions=instructions,
            budget=budget(p, results, seeds, judged, missing, timings),
        ),
        versions=versions("torch", "transformers", "trl", "alpaca_eval"),
        robustness=StudyRobustness.of(results),
        head_to_head=judged_pairs.get(first),
        more_head_to_heads={arm: result for arm, result in judged_pairs.items() if arm != first},
        exits=exits,
        timings=timings,
    )
    study.files = write_study_report(study, p.folder, p.options.examples)
    write_json(p.folder.study_json, study.to_dict())
    return study


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
