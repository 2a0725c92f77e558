"""
Robustness evaluation for every task (`constrained-sft eval robustness`): each model's headline (token accuracy,
accuracy or RMSE) and loss against the noise level gamma, layerwise loss curves and per-sample descent, measured
through the task's own training code path; arms of models (several training seeds each) compared statistic by
statistic with paired-bootstrap intervals (`compare`); results.json / results.csv / PNG plots / report.html.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from ..data import ModelSpec
from ..noise import NoiseGrid, embedding_sigma
from ..tasks import TASKS, Measure, get_task
from ..utils.fields import check_fields
from ..utils.folders import check_output_folder
from .arms import ArmArguments
from .compare import bands, check_pairs, compare
from .folders import check_folder, mark_folder, model_identities, read_marker
from .levels import evaluate_level
from .loading import layer_indices, recorded_gamma, reference_sigma, trained_layers, training_report, versions
from .metrics import summarize
from .report import write_report
from .results import ModelResult, RobustnessResults, RobustnessSettings


@dataclass
class RobustnessArguments(ArmArguments):
    task: str | None = field(
        default=None,
        metadata={
            "help": "The models' task: 'sft' (causal LMs, the default), 'classification' or 'video' (denoisers: RMSE "
            "instead of accuracy); a recipe's `task` sets it.",
            "choices": list(TASKS),
        },
    )
    output_dir: str = field(
        default=None, metadata={"help": "Where results.json, results.csv, the plots and report.html go."}
    )
    base_model: str | None = field(default=None, metadata={"help": "Base model of adapters that do not name one."})
    recipe: str | None = field(
        default=None, metadata={"help": "A training recipe whose data fields define the held-out set."}
    )
    gammas: list[float] | None = field(
        default=None,
        metadata={"help": "Test noise levels (default: 0 to 4x the training level in 5 steps; 0..2 without one)."},
    )
    train_gamma: float | None = field(
        default=None,
        metadata={
            "help": "Training noise level, the ID / OOD boundary (default: from the first model's constraints.json, "
            "else the recipe)."
        },
    )
    seeds: int = field(default=3, metadata={"help": "Noise seeds per level; results are mean and std over them."})
    noise_mean: float = field(default=0.0, metadata={"help": "Mean of the noise."})
    sigma_x: float | None = field(
        default=None,
        metadata={
            "help": "sigma_x for every model compared (default: `noise_sigma_x` in the first model's constraints.json, "
            "the starting model's scale its training used; else measured on the first model)."
        },
    )
    layers: str = field(
        default="trained",
        metadata={
            "help": "'trained' (the layers in the model's constraints.json, else all), 'all', or comma-separated indices."
        },
    )
    curve_gammas: list[float] | None = field(
        default=None,
        metadata={"help": "Levels of the layer-curve plot and frame strip (default: 0, the training level, the top)."},
    )
    batch_size: int = field(default=8, metadata={"help": "Evaluation batch size."})
    max_length: int = field(
        default=1024,
        metadata={"help": "Truncate sequences to this many tokens (default: the recipe's max_length, else 1024)."},
    )
    bf16: bool | None = field(
        default=None, metadata={"help": "bf16 weights and autocast (default: on CUDA devices that support it)."}
    )
    bootstrap_samples: int = field(default=2000, metadata={"help": "Paired-bootstrap resamples per interval."})

    def __post_init__(self) -> None:
        check_fields(self)
        check_output_folder(self.output_dir, "--output_dir")

    def validate(self, arms: dict[str, list[tuple[str, str]]] | None = None) -> None:
        """Every field checked before any work; `arms`: models given by the caller instead of --models / --arm."""
        self.validate_selection(arms)
        if not self.output_dir:
            raise ValueError("`--output_dir` is required.")
        for name in ("gammas", "curve_gammas"):
            if getattr(self, name) is not None:
                NoiseGrid.parse(getattr(self, name), f"--{name}")
        if self.train_gamma is not None and (not np.isfinite(self.train_gamma) or self.train_gamma < 0):
            raise ValueError(f"`--train_gamma` must be finite and >= 0, got {self.train_gamma}.")
        if self.sigma_x is not None and not (np.isfinite(self.sigma_x) and self.sigma_x > 0):
            raise ValueError(f"`--sigma_x` must be a finite number > 0, got {self.sigma_x}.")
        for name in ("seeds", "batch_size", "bootstrap_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"`--{name}` must be >= 1, got {getattr(self, name)}.")
        if self.layers not in ("trained", "all"):
            layer_indices(self.layers)
        self.check_paths(self.arms() if arms is None else arms)


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
    args.validate(arms)
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
    settings = {
        **{k: v for k, v in dataclasses.asdict(args).items() if k not in PRESENTATION},
        **dict(task=task.name, gammas=gammas.to_list(), curve_gammas=curve, train_gamma=train_gamma),
        "arms": {arm: [name for name, _ in members] for arm, members in arms.items()},
        "models": model_identities(models),
        "data": dataclasses.asdict(data_args),
    }
    if claim:
        check_folder(args.output_dir, COMMAND, settings)
    data = task.measuring.evaluation_data(data_args)
    bf16 = args.bf16 if args.bf16 is not None else bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    dtype = torch.bfloat16 if bf16 else torch.float32
    sigma, source = reference_sigma(args.sigma_x, first)
    results = RobustnessResults(
        settings=RobustnessSettings(
            description=f"{task.measuring.describe(data, data_args)}: N({args.noise_mean}, (gamma sigma_x)^2); "
            f"{args.seeds} noise seed(s) per level",
            task=task.name,
            dataset=dataclasses.asdict(data_args),
            gammas=gammas,
            curve_gammas=curve,
            seeds=args.seeds,
            train_gamma=train_gamma,
            noise_mean=args.noise_mean,
            sigma_x=sigma,  # one scale for every model compared
            sigma_x_source=source,
            dtype=str(dtype),
            batch_size=args.batch_size,
            max_length=args.max_length,
            bootstrap_samples=args.bootstrap_samples,
        ),
        versions=versions("torch", "transformers", "trl"),
        headline=task.headline,
        layer_curve=tuple(task.layer_curve),
        arms={arm: [name for name, _ in members] for arm, members in arms.items()},
    )
    snapshots = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, path in models:
            flag = "--arm" if args.arm else "--models"
            model, tokenizer = task.measuring.load_model(ModelSpec(name, path, args.base_model, flag), dtype)
            if sigma is None:
                sigma, source = embedding_sigma(model), f"measured on {name}'s input embeddings"
                results.settings.sigma_x, results.settings.sigma_x_source = sigma, source
            measure = Measure(
                trained_layers(args.layers, path), args.batch_size, args.max_length, bf16, scratch, sigma
            )
            trainer = task.measuring.measuring_trainer(model, tokenizer, data, measure)
            results.settings.held_out_rows = len(trainer.eval_dataset)
            batches = len(trainer.get_eval_dataloader())
            levels = []
            with tqdm(total=len(gammas) * args.seeds * batches, desc=f"evaluating {name}") as bar:
                for gamma in gammas:
                    levels.append(
                        [
                            evaluate_level(task, trainer, gamma, s, args.noise_mean, bar.update)
                            for s in range(args.seeds)
                        ]
                    )
            results.models[name] = ModelResult(
                path=path,
                architecture=type(model).__name__,
                noise_sigma_x_recorded=training_report(path).get("noise_sigma_x"),  # its own training's
                layers=list(trainer.primal_dual.spec.layers),
                summary=summarize(levels, train_gamma, task.measuring.layer_curves),
                # per unit, summed over noise seeds: what the intervals resample
                scores={NoiseGrid.key(lv[0].gamma): _seed_sums(lv) for lv in levels},
            )
            snapshot = task.measuring.snapshot(model, trainer, data, curve, sigma, args.noise_mean)
            if snapshot is not None:
                snapshots[name] = snapshot
            del trainer, model
    results.bands = bands(results, task, args.bootstrap_samples)
    results.comparisons = compare(results, task, pairs, args.bootstrap_samples)
    mark_folder(args.output_dir, COMMAND, settings)
    figures = task.measuring.figures(snapshots, data, args.output_dir)
    from .report.headtohead import folder_sections  # the AlpacaEval part of a shared report folder, if any

    write_report(results, args.output_dir, figures, folder_sections(args.output_dir))
    return results


def saved_results(
    output_dir: str, arms: dict[str, list[tuple[str, str]]], gammas, seeds: int, task, pairs, n_boot
) -> RobustnessResults | None:
    """A finished evaluation in `output_dir` (its results.json) of exactly these models (arm -> [(name, path)], the
    same weights: `folders.model_identities`), levels and noise seeds, with its comparisons recomputed from its saved
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


def _seed_sums(per_seed) -> dict[str, list[float]]:
    """One level's unit scores summed over its noise seeds."""
    keys = per_seed[0].scores
    return {k: np.sum([r.scores[k] for r in per_seed], axis=0).tolist() for k in keys}


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
