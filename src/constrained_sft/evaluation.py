"""
Robustness evaluation as library functions: accuracy and loss against the embedding-noise level gamma, layerwise
loss curves, and per-sample descent statistics, computed through the same trainer code path as training (token
selection, readout, probe, noise hook), so the numbers agree with what training logged.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .layer_losses import step_ratios
from .models import ModelPathError, has_classification_head, load_tokenizer, resolve_model_path
from .noise import embedding_noise

RATIO_BINS = np.linspace(0.0, 2.0, 41)  # histogram of f_l / f_{l-1}; values above 2 land in the last bin


@dataclass
class ModelSpec:
    name: str
    path: str  # a folder saved by the trainer, a Hub id, `pkg:...`, or a LoRA adapter folder
    base_model: str | None = None  # for an adapter whose config does not name its base


@dataclass
class LevelResult:
    """One model at one noise level with one noise seed."""

    gamma: float
    seed: int
    accuracy: float  # final-layer top-1 accuracy on supervised tokens (classifiers: examples)
    loss: float  # final-layer mean NLL
    layer_loss: dict[int, float]
    descent_share: float  # share of (sequence, layer step) pairs with f_l < f_{l-1}
    ratios: list[float] = field(repr=False)  # f_l / f_{l-1} for every (sequence, step)


def training_report(path: str) -> dict[str, Any]:
    """`constraints.json` written at the end of training, if the folder has one."""
    report = os.path.join(path, "constraints.json")
    if os.path.isfile(report):
        with open(report) as f:
            return json.load(f)
    return {}


def is_classifier(path: str) -> bool:
    """Whether a saved model (or adapter's base) is a sequence classifier rather than a causal LM."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(resolve_model_path(path))
    except (OSError, ValueError):
        return False
    return has_classification_head(config)


def load_model(spec: ModelSpec, dtype: torch.dtype, task: str = "sft"):
    """(model, tokenizer) from a saved folder, Hub id, offline alias, or a LoRA adapter on its base model."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    auto = AutoModelForSequenceClassification if task == "classification" else AutoModelForCausalLM

    if os.path.isdir(spec.path) and os.path.isfile(os.path.join(spec.path, "adapter_config.json")):
        from peft import PeftModel

        with open(os.path.join(spec.path, "adapter_config.json")) as f:
            base = spec.base_model or json.load(f).get("base_model_name_or_path")
        if not base:
            raise ModelPathError(f"Adapter {spec.path!r} does not name its base model; pass --base_model.")
        base_path = resolve_model_path(base)
        model = PeftModel.from_pretrained(auto.from_pretrained(base_path, dtype=dtype), spec.path)
        has_tokenizer = any(
            os.path.isfile(os.path.join(spec.path, f)) for f in ("tokenizer.json", "tokenizer_config.json")
        )
        return model, load_tokenizer(spec.path if has_tokenizer else base_path)
    if not os.path.exists(spec.path) and not spec.path.startswith("pkg:") and spec.path.count("/") != 1:
        raise ModelPathError(f"Model {spec.name!r}: path {spec.path!r} does not exist.")
    path = resolve_model_path(spec.path)
    if task == "sft" and is_classifier(path):
        raise ValueError(f"Model {spec.name!r} is a sequence classifier; evaluate it with `--task classification`.")
    return auto.from_pretrained(path, dtype=dtype), load_tokenizer(path)


def _measure_only(output_dir: str, batch_size: int, bf16: bool, layers) -> dict[str, Any]:
    """Trainer arguments shared by both evaluation trainers: no constraints, no logging, every layer measured."""
    return dict(
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


def eval_trainer(model, tokenizer, dataset, layers, batch_size: int, max_length: int, bf16: bool, output_dir: str):
    """A ConstrainedSFTTrainer that only measures (`constraints="none"`), to reuse training's data path."""
    from .config import ConstrainedSFTConfig
    from .sft_trainer import ConstrainedSFTTrainer

    args = ConstrainedSFTConfig(
        **_measure_only(output_dir, batch_size, bf16, layers),
        max_length=max_length,
        gradient_checkpointing=False,  # TRL turns it on by default; evaluation has no backward
    )
    return ConstrainedSFTTrainer(
        model=model, args=args, train_dataset=dataset, eval_dataset=dataset, processing_class=tokenizer
    )


def classifier_eval_trainer(model, tokenizer, dataset, layers, batch_size: int, bf16: bool, output_dir: str):
    """A ConstrainedTrainer that only measures, on an already tokenized classification dataset."""
    from transformers import DataCollatorWithPadding

    from .classifier_trainer import ConstrainedConfig, ConstrainedTrainer

    return ConstrainedTrainer(
        model=model,
        args=ConstrainedConfig(**_measure_only(output_dir, batch_size, bf16, layers)),
        eval_dataset=dataset,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
    )


def evaluate_level(trainer, gamma: float, seed: int, mean: float = 0.0, progress: Callable[[], None] | None = None):
    """Every held-out batch at noise level `gamma` with noise stream `seed`."""
    spec = trainer.primal_dual.spec
    device = trainer.args.device
    correct = count = nll = 0.0
    layer_sums = torch.zeros(len(spec.layers), dtype=torch.float64)
    tokens = 0.0
    ratios: list[torch.Tensor] = []
    generator = torch.Generator(device=device).manual_seed(seed)
    with embedding_noise(trainer.model, gamma=gamma, mean=mean, generator=generator):
        for batch in trainer.get_eval_dataloader():
            score = trainer.score_batch(batch)
            correct, count, nll = correct + score.correct, count + score.count, nll + score.nll
            layer_sums += score.layers.sums.detach().double().cpu()
            tokens += score.layers.num_tokens.item()
            ratios.append(step_ratios(score.layers).cpu())
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
    )


def auc(gammas: Sequence[float], values: Sequence[float]) -> float:
    """Trapezoidal area under values(gamma)."""
    return float(np.trapezoid(values, gammas)) if len(gammas) > 1 else math.nan


def summarize(levels: list[list[LevelResult]], train_gamma: float) -> dict[str, Any]:
    """Mean and std over seeds at each gamma, then AUC, ID (gamma <= train) and OOD (gamma > train) accuracy."""
    rows = []
    for per_seed in levels:
        acc = [r.accuracy for r in per_seed]
        loss = [r.loss for r in per_seed]
        ratios = np.array([x for r in per_seed for x in r.ratios])
        hist, _ = np.histogram(np.clip(ratios, RATIO_BINS[0], RATIO_BINS[-1]), bins=RATIO_BINS)
        layers = per_seed[0].layer_loss
        rows.append(
            {
                "gamma": per_seed[0].gamma,
                "accuracy_mean": statistics.fmean(acc),
                "accuracy_std": statistics.pstdev(acc),
                "loss_mean": statistics.fmean(loss),
                "loss_std": statistics.pstdev(loss),
                "layer_loss": {
                    str(layer): statistics.fmean(r.layer_loss[layer] for r in per_seed) for layer in layers
                },
                "descent_share": statistics.fmean(r.descent_share for r in per_seed),
                "ratio_mean": float(ratios.mean()) if ratios.size else math.nan,
                "ratio_median": float(np.median(ratios)) if ratios.size else math.nan,
                "ratio_histogram": {"edges": RATIO_BINS.tolist(), "counts": hist.tolist()},
                "seeds": [r.seed for r in per_seed],
            }
        )
    gammas = [r["gamma"] for r in rows]
    acc = [r["accuracy_mean"] for r in rows]
    ind = [a for g, a in zip(gammas, acc, strict=True) if g <= train_gamma]
    ood = [a for g, a in zip(gammas, acc, strict=True) if g > train_gamma]
    return {
        "train_gamma": train_gamma,
        "levels": rows,
        "auc": auc(gammas, acc),
        "id_accuracy": statistics.fmean(ind) if ind else math.nan,
        "ood_accuracy": statistics.fmean(ood) if ood else math.nan,
        "descent_share": statistics.fmean(r["descent_share"] for r in rows),
    }


def differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """a - b for the summary numbers and at every gamma (accuracy and descent share)."""
    keys = ("auc", "id_accuracy", "ood_accuracy", "descent_share")
    by_gamma = {r["gamma"]: r for r in b["levels"]}
    return {
        **{k: a[k] - b[k] for k in keys},
        "per_gamma": [
            {
                "gamma": r["gamma"],
                "accuracy": r["accuracy_mean"] - by_gamma[r["gamma"]]["accuracy_mean"],
                "descent_share": r["descent_share"] - by_gamma[r["gamma"]]["descent_share"],
            }
            for r in a["levels"]
            if r["gamma"] in by_gamma
        ],
    }
