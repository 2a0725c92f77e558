"""
Loading the models an evaluation compares: saved folders, Hub ids, `pkg:` aliases and LoRA adapters on their base,
and the training report (`constraints.json`) a saved run carries.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import torch

from ..constraints.state_io import REPORT
from ..data.models import ModelPathError, has_classification_head, load_tokenizer, resolve_model_path
from ..models import PooledLinearConfig, PooledLinearForSequenceClassification, UTConfig, UTForSequenceClassification


@dataclass
class ModelSpec:
    name: str
    path: str  # a folder saved by the trainer, a Hub id, `pkg:...`, or a LoRA adapter folder
    base_model: str | None = None  # for an adapter whose config does not name its base


def training_report(path: str) -> dict[str, Any]:
    """`constraints.json` written at the end of training, if the folder has one."""
    report = os.path.join(path, REPORT)
    if os.path.isfile(report):
        with open(report) as f:
            return json.load(f)
    return {}


def reference_sigma(given: float | None, first_model: str) -> tuple[float | None, str | None]:
    """(sigma_x, where it comes from) for a comparison: as given, else as the first model's training recorded it;
    (None, None) when neither says, and the caller measures the first model."""
    if given is not None:
        return given, "--sigma_x"
    recorded = training_report(first_model).get("noise_sigma_x")
    if recorded is not None:
        return float(recorded), f"noise_sigma_x in {os.path.join(first_model, REPORT)}"
    return None, None


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


def build_classifier(
    path: str,
    config,
    names: list[str],
    readout: str = "head",
    pooling: str = "cls",
    architecture: str = "pretrained",
    ut_layers: int = 3,
    **kwargs,
):
    """A sequence classifier to train. `readout='head'`: the model's own head (a plain encoder, `config` without
    one, gets a new head with the dataset's classes `names`). `readout='linear'`: the encoder under the paper's
    shared linear readout (any pretrained head dropped; a model saved with that readout reloads as it is).
    `architecture='ut'`: a new `ut_layers`-layer unrolled transformer on the encoder's word embeddings (a saved UT
    reloads as it is). `kwargs` (revision, dtype) go to `from_pretrained`."""
    from transformers import AutoModelForSequenceClassification

    labels = {
        "num_labels": len(names),
        "id2label": dict(enumerate(names)),
        "label2id": {n: i for i, n in enumerate(names)},
    }
    if architecture == "ut" and not isinstance(config, UTConfig):
        model = UTForSequenceClassification.from_pretrained_embeddings(
            path, num_layers=ut_layers, revision=kwargs.get("revision"), **labels
        )
        dtype = kwargs.get("dtype")
        return model.to(dtype) if isinstance(dtype, torch.dtype) else model
    if readout == "linear" and not isinstance(config, PooledLinearConfig):
        return PooledLinearForSequenceClassification.from_encoder(path, pooling=pooling, **labels, **kwargs)
    if has_classification_head(config):
        return AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
    return AutoModelForSequenceClassification.from_pretrained(path, **labels, **kwargs)
