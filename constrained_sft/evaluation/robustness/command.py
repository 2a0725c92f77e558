"""
Robustness evaluation for every task (`constrained-sft eval robustness`): each model's headline (token accuracy,
accuracy or RMSE) and loss against the noise level gamma, layerwise loss curves and per-sample descent, measured
through the task's own training code path; arms of models (several training seeds each) compared statistic by
statistic with paired-bootstrap intervals (`compare`); results.json / results.csv / PNG plots / report.html.
"""

from __future__ import annotations

import dataclasses
import math

from ...data import ModelSpec, model_identities
from ...noise import NoiseGrid, embedding_sigma
from ...tasks import Task, get_task
from ...utils.output_folders import check_folder, mark_folder, read_marker
from ...utils.types import JSONObject
from ..loading import auto_bf16, recorded_gamma, recorded_scale, reference_sigma
from .arguments import RobustnessArguments
from .compare import check_pairs, compare
from .measure import Measurement, finish, measure_model
from .results import RobustnessResults

COMMAND = "eval robustness"
# arguments that do not decide the measurements: where they go, how the intervals are drawn and which differences
# are shown (recomputed from the saved measurements); the models are named by their identity instead
PRESENTATION = ("output_dir", "bootstrap_samples", "reference", "models", "names", "arm")


def run(
    args: RobustnessArguments, data_args, recipe: dict | None = None, arms=None, pairs=None, claim: bool = True
) -> RobustnessResults:
    """
    Every model at every level and noise seed, then the comparisons and the report. `data_args`: the task's data
    fields (the held-out rows); `recipe`: the training recipe's keys, if any; `arms`: {arm: [(model name, path)]}
    instead of `args.models` / `args.arm`; `pairs`: [(A, B)] compared as A - B (default: every arm - the reference).
    `claim`: refuse an output folder another command, or other settings, wrote (False: the caller, a study or a
    sweep, owns the folder and replaces its own derived results).
    """
    recipe = recipe or {}
    task = get_task(args.task or recipe.get("task"))
    output_dir = args.validate(arms)
    arms = args.arms() if arms is None else arms
    pairs = args.pairs(list(arms)) if pairs is None else pairs
    check_pairs({arm: len(members) for arm, members in arms.items()}, pairs)
    models = [member for members in arms.values() for member in members]
    first = models[0][1]
    train_gamma = recorded_gamma(args.train_gamma, first, recipe)
    gammas = (NoiseGrid.parse(args.gammas) if args.gammas else NoiseGrid.default(train_gamma)).sorted()
    curve = args.curve_gammas or sorted({gammas[0], min(gammas, key=lambda g: abs(g - train_gamma)), gammas[-1]})
    if missing := [g for g in curve if g not in gammas]:
        raise ValueError(f"`--curve_gammas` {missing} are not among the evaluated levels {gammas.to_list()}.")
    settings: JSONObject = {
        **{k: v for k, v in dataclasses.asdict(args).items() if k not in PRESENTATION},
        **dict(task=task.name, gammas=gammas.to_list(), curve_gammas=curve, train_gamma=train_gamma),
        "arms": {arm: [name for name, _ in members] for arm, members in arms.items()},
        "models": model_identities(models),
        "data": dataclasses.asdict(data_args),
    }
    if claim:
        check_folder(output_dir, COMMAND, settings)
    data = task.measuring.evaluation_data(data_args)
    bf16 = args.bf16 if args.bf16 is not None else auto_bf16()
    sigma, source = reference_sigma(args.sigma_x, first)
    image_sigma, image_source = recorded_scale(args.image_sigma, first, "--image_sigma", "noise_image_sigma_x")
    m = Measurement(
        task,
        data,
        data_args,
        gammas,
        curve,
        train_gamma,
        args.seeds,
        args.noise_mean,
        sigma,
        source,
        args.layers,
        args.batch_size,
        args.max_length,
        bf16,
        args.base_model,
        "--arm" if args.arm else "--models",
        args.noise_modality,
        image_sigma,
        image_source,
    )
    results = m.results({arm: [name for name, _ in members] for arm, members in arms.items()}, args.bootstrap_samples)
    snapshots = {}
    for name, path in models:
        model, tokenizer = task.measuring.load_model(ModelSpec(name, path, args.base_model, m.flag), m.dtype)
        if m.sigma is None:  # one scale for every model compared: the first's
            m.sigma, m.sigma_source = embedding_sigma(model), f"measured on {name}'s input embeddings"
            results.settings.sigma_x, results.settings.sigma_x_source = m.sigma, m.sigma_source
        measured = measure_model(m, name, path, model, tokenizer)  # measures a VLM's image scale where none is set
        results.settings.image_sigma, results.settings.image_sigma_source = m.image_sigma, m.image_sigma_source
        results.models[name], results.settings.held_out_rows = measured.result, measured.held_out_rows
        if measured.snapshot is not None:
            snapshots[name] = measured.snapshot
        del model, measured
    mark_folder(output_dir, COMMAND, settings)
    figures = task.measuring.figures(snapshots, data, output_dir)
    return finish(results, task, pairs, output_dir, figures)


def saved_results(
    output_dir: str, arms: dict[str, list[tuple[str, str]]], gammas, seeds: int, task: Task, pairs, n_boot
) -> RobustnessResults | None:
    """A finished evaluation in `output_dir` (its results.json) of exactly these models (arm -> [(name, path)], the
    same weights: `data.model_identities`), levels and noise seeds, with its comparisons recomputed from its saved
    unit scores for `pairs` and `n_boot`; None when there is none. A rerun of a sweep's comparison or a study then
    does not evaluate again."""
    results = RobustnessResults.load(output_dir)
    if results is None:
        return None
    names = {arm: [name for name, _ in members] for arm, members in arms.items()}
    paths = {name: path for members in arms.values() for name, path in members}
    same = results.gammas.to_list() == list(gammas) and results.settings.seeds == seeds
    if not same or results.arms != names or {n: m.path for n, m in results.models.items()} != paths:
        return None
    marked = (read_marker(output_dir, "--output_dir") or {}).get(COMMAND, {}).get("settings", {})
    if marked.get("models") != model_identities(list(paths.items())):
        return None  # retrained behind the same names (or no record of which weights were measured)
    results.comparisons = compare(results, task, pairs, n_boot)
    return results


def console_lines(results: RobustnessResults) -> list[str]:
    """What `eval robustness` prints: each model's summary, then each comparison with its intervals."""
    key = results.headline.key
    lines = []
    for name, model in results.models.items():
        s = model.summary
        levels = ", ".join(f"{r.gamma:g}: {r.metric_mean:.4g}" for r in s.levels)
        lines.append(
            f"{name}: {key} by gamma {{{levels}}}; AUC {s.auc:.4g}, ID {s.id_metric:.4g}, "
            f"OOD {s.ood_metric:.4g}, descent share {s.descent_share:.3f}"
        )
    for name, comparison in results.comparisons.items():
        lines.append(f"{name} (95% paired bootstrap over training seeds and held-out units):")
        for stat, row in comparison.rows.items():
            d = row.difference
            value = f"{d.estimate:+.4g} [{d.low:+.4g}, {d.high:+.4g}]"
            lines.append(f"  {stat:<18} {value:<34} {d.verdict}" if math.isfinite(d.estimate) else f"  {stat}: -")
    lines.append(f"report: {results.files['html']}")
    return lines
