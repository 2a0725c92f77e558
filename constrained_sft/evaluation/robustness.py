"""
Robustness evaluation: accuracy and loss against the embedding-noise level gamma, layerwise loss curves, and
per-sample descent statistics, computed through the same trainer code path as training (token selection, readout,
probe, noise hook), so the numbers agree with what training logged. `run` evaluates several models on one held-out
set and writes the report (`constrained-sft eval robustness`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import DataCollatorWithPadding

from ..config import ConstrainedConfig, ConstrainedSFTConfig
from ..data import DataArguments, ModelPathError, load_classification, load_train_eval
from ..noise import embedding_noise, embedding_sigma
from ..trainers import ConstrainedSFTTrainer, ConstrainedTrainer
from .loading import ModelSpec, load_model, reference_sigma, training_report
from .metrics import LevelResult, differences, step_ratios, summarize
from .report import write_report


def _measure_only(output_dir: str, batch_size: int, bf16: bool, layers, sigma: float | None) -> dict[str, Any]:
    """Trainer arguments shared by both evaluation trainers: no constraints, no logging, every layer measured, and
    the noise scale sigma_x of the comparison (None: the model's own)."""
    return dict(
        noise_sigma=sigma,
        output_dir=output_dir,
        per_device_eval_batch_size=batch_size,
        bf16=bf16,
        use_cpu=not torch.cuda.is_available(),
        report_to="none",
        constraints="none",
        constrained_layers=layers,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def eval_trainer(
    model,
    tokenizer,
    dataset,
    layers,
    batch_size: int,
    max_length: int,
    bf16: bool,
    output_dir: str,
    sigma: float | None = None,
):
    """A ConstrainedSFTTrainer that only measures (`constraints="none"`), to reuse training's data path."""
    args = ConstrainedSFTConfig(
        **_measure_only(output_dir, batch_size, bf16, layers, sigma),
        max_length=max_length,
        gradient_checkpointing=False,  # TRL turns it on by default; evaluation has no backward
    )
    return ConstrainedSFTTrainer(
        model=model, args=args, train_dataset=dataset, eval_dataset=dataset, processing_class=tokenizer
    )


def classifier_eval_trainer(
    model, tokenizer, dataset, layers, batch_size: int, bf16: bool, output_dir: str, sigma: float | None = None
):
    """A ConstrainedTrainer that only measures, on an already tokenized classification dataset."""
    return ConstrainedTrainer(
        model=model,
        args=ConstrainedConfig(**_measure_only(output_dir, batch_size, bf16, layers, sigma)),
        eval_dataset=dataset,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
    )


def evaluate_level(trainer, gamma: float, seed: int, mean: float = 0.0, progress: Callable[[], None] | None = None):
    """Every held-out batch at noise level `gamma` with noise stream `seed`, at the trainer's sigma_x."""
    spec = trainer.primal_dual.spec
    device = trainer.args.device
    correct = count = nll = 0.0
    layer_sums = torch.zeros(len(spec.layers), dtype=torch.float64)
    tokens = 0.0
    ratios: list[torch.Tensor] = []
    hits: list[torch.Tensor] = []
    generator = torch.Generator(device=device).manual_seed(seed)
    with embedding_noise(trainer.model, gamma=gamma, mean=mean, generator=generator, sigma=trainer.noise_sigma):
        for batch in trainer.get_eval_dataloader():
            score = trainer.score_batch(batch)
            correct, count, nll = correct + score.correct, count + score.count, nll + score.nll
            layer_sums += score.layers.sums.detach().double().cpu()
            tokens += score.layers.num_tokens.item()
            ratios.append(step_ratios(score.layers).cpu())
            if score.hits is not None:
                hits.append(score.hits)
            if progress is not None:
                progress()
    if count == 0:
        raise ValueError("The held-out dataset has no supervised token to evaluate.")
    ratio = torch.cat(ratios) if ratios else torch.zeros(0)
    return LevelResult(
        gamma=gamma,
        seed=seed,
        accuracy=correct / count,
        loss=nll / count,
        layer_loss={layer: (s / tokens).item() for layer, s in zip(spec.layers, layer_sums, strict=True)},
        descent_share=ratio.lt(1).double().mean().item() if ratio.numel() else math.nan,
        ratios=ratio.tolist(),
        hits="".join("1" if h else "0" for h in torch.cat(hits).tolist()) if hits else "",
    )


@dataclass
class RobustnessArguments:
    task: str = field(
        default="sft",
        metadata={
            "help": "'sft' (causal LMs), 'classification' or 'video' (denoisers: RMSE instead of accuracy); a "
            "recipe's `task` sets it.",
            "choices": ["sft", "classification", "video"],
        },
    )
    models: list[str] = field(
        default=None, metadata={"help": "Model folders, Hub ids, `pkg:` aliases or LoRA adapter folders."}
    )
    output_dir: str = field(
        default=None, metadata={"help": "Where results.json, results.csv, the plots and report.html go."}
    )
    names: list[str] | None = field(
        default=None, metadata={"help": "A display name per model (default: folder names)."}
    )
    base_model: str | None = field(default=None, metadata={"help": "Base model of adapters that do not name one."})
    recipe: str | None = field(
        default=None, metadata={"help": "A training recipe whose data fields define the held-out set."}
    )
    gammas: list[float] | None = field(
        default=None,
        metadata={
            "help": "Test noise levels (default: 9 levels from 0 to 2x the training level; video: 7 levels to 3x)."
        },
    )
    train_gamma: float | None = field(
        default=None,
        metadata={
            "help": "Training noise level, the ID / OOD boundary (default: from the first model's constraints.json, else the recipe)."
        },
    )
    seeds: int = field(default=3, metadata={"help": "Noise seeds per level; results are mean and std over them."})
    noise_mean: float = field(default=0.0, metadata={"help": "Mean of the embedding noise."})
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
        metadata={"help": "Levels for the layer-curve plot (default: 0, the training level, the largest)."},
    )
    batch_size: int = field(default=8, metadata={"help": "Evaluation batch size."})
    max_length: int = field(
        default=1024,
        metadata={"help": "Truncate sequences to this many tokens (default: the recipe's max_length, else 1024)."},
    )
    bf16: bool | None = field(
        default=None, metadata={"help": "bf16 weights and autocast (default: on CUDA devices that support it)."}
    )

    def validate(self) -> None:
        if not self.models:
            raise ValueError("`--models` needs at least one model.")
        if not self.output_dir:
            raise ValueError("`--output_dir` is required.")
        if self.names is not None and len(self.names) != len(self.models):
            raise ValueError(
                f"`--names` has {len(self.names)} names for {len(self.models)} models; give one name per model."
            )
        for name, values in (
            ("gammas", self.gammas),
            ("curve_gammas", self.curve_gammas),
            ("train_gamma", [self.train_gamma]),
        ):
            if values and any(v is not None and (not np.isfinite(v) or v < 0) for v in values):
                raise ValueError(f"`--{name}` values must be finite and >= 0, got {values}.")
        if self.sigma_x is not None and not (np.isfinite(self.sigma_x) and self.sigma_x > 0):
            raise ValueError(f"`--sigma_x` must be a finite number > 0, got {self.sigma_x}.")
        if self.seeds < 1 or self.batch_size < 1:
            raise ValueError("`--seeds` and `--batch_size` must be >= 1.")
        for path in self.models:
            if not path.startswith("pkg:") and path.count("/") != 1 and not os.path.exists(path):
                raise ModelPathError(
                    f"`--models` {path!r} does not exist; allowed: a local model folder, a Hub id or a pkg: alias."
                )


def _train_gamma(args: RobustnessArguments, recipe: dict) -> float:
    if args.train_gamma is not None:
        return args.train_gamma
    value = training_report(args.models[0]).get("noise_gamma", recipe.get("noise_gamma", 0.0))
    return float(max(value) if isinstance(value, list) else value or 0.0)


def _layers(args: RobustnessArguments, path: str):
    if args.layers == "trained":
        return training_report(path).get("layers", "all")
    if args.layers == "all":
        return "all"
    return [int(x) for x in args.layers.replace(",", " ").split()]


def run(args: RobustnessArguments, data_args: DataArguments, recipe: dict | None = None) -> dict:
    args.validate()
    recipe = recipe or {}
    train_gamma = _train_gamma(args, recipe)
    top = 2 * train_gamma if train_gamma > 0 else 2.0
    gammas = sorted(set(args.gammas)) if args.gammas else [float(round(g, 6)) for g in np.linspace(0, top, 9)]
    curve = args.curve_gammas or sorted({gammas[0], min(gammas, key=lambda g: abs(g - train_gamma)), gammas[-1]})
    if missing := [g for g in curve if g not in gammas]:
        raise ValueError(f"`--curve_gammas` {missing} are not among the evaluated levels {gammas}.")
    classification = args.task == "classification"
    held_out = None if classification else load_train_eval(data_args)[1]
    bf16 = args.bf16 if args.bf16 is not None else bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    dtype = torch.bfloat16 if bf16 else torch.float32
    names = args.names or [os.path.basename(os.path.normpath(p)) or p for p in args.models]
    sigma, source = reference_sigma(args.sigma_x, args.models[0])
    results = {
        "settings": {
            "description": f"held-out rows of {data_args.dataset_name}; {args.seeds} noise seed(s) per "
            f"level; noise N({args.noise_mean}, (gamma sigma_x)^2) on every token embedding",
            "dataset": dataclasses.asdict(data_args),
            "gammas": gammas,
            "curve_gammas": curve,
            "seeds": args.seeds,
            "train_gamma": train_gamma,
            "noise_mean": args.noise_mean,
            "sigma_x": sigma,  # one scale for every model compared
            "sigma_x_source": source,
            "dtype": str(dtype),
            "batch_size": args.batch_size,
            "max_length": args.max_length,
            "task": args.task,
        },
        "versions": {p: version(p) for p in ("constrained-sft", "torch", "transformers", "trl")},
        "accuracy_label": "accuracy (examples)"
        if classification
        else "mean token accuracy (final layer, supervised tokens)",
        "models": {},
    }
    with tempfile.TemporaryDirectory() as scratch:
        for name, path in zip(names, args.models, strict=True):
            model, tokenizer = load_model(ModelSpec(name, path, args.base_model), dtype, args.task)
            if sigma is None:
                sigma, source = embedding_sigma(model), f"measured on {name}'s input embeddings"
                results["settings"].update(sigma_x=sigma, sigma_x_source=source)
            if classification:  # tokenized with each model's own tokenizer; labels checked against its head
                _, rows, _ = load_classification(data_args, tokenizer, model.config.num_labels)
                trainer = classifier_eval_trainer(
                    model, tokenizer, rows, _layers(args, path), args.batch_size, bf16, scratch, sigma
                )
            else:
                trainer = eval_trainer(
                    model,
                    tokenizer,
                    held_out,
                    _layers(args, path),
                    args.batch_size,
                    args.max_length,
                    bf16,
                    scratch,
                    sigma,
                )
            results["settings"]["held_out_rows"] = len(trainer.eval_dataset)
            batches = len(trainer.get_eval_dataloader())
            levels: list[list[LevelResult]] = []
            with tqdm(total=len(gammas) * args.seeds * batches, desc=f"evaluating {name}") as bar:
                for gamma in gammas:
                    levels.append(
                        [
                            evaluate_level(trainer, gamma, seed, args.noise_mean, bar.update)
                            for seed in range(args.seeds)
                        ]
                    )
            results["models"][name] = {
                "path": path,
                "noise_sigma_x_recorded": training_report(path).get("noise_sigma_x"),  # its own training's
                "layers": list(trainer.primal_dual.spec.layers),
                "summary": summarize(levels, train_gamma),
            }
            if classification:  # per example, for paired comparisons: {gamma: [one '0'/'1' string per seed]}
                results["models"][name]["hits"] = {str(lv[0].gamma): [r.hits for r in lv] for lv in levels}
            del trainer, model
    if len(names) == 2:
        a, b = (results["models"][n]["summary"] for n in names)
        results["differences"] = {"label": f"{names[0]} - {names[1]}", **differences(a, b)}
    results["files"] = write_report(results, args.output_dir)
    return results
