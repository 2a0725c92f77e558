"""The transformers model inside wrappers (PEFT, DDP, compile), and gathering ZeRO-3 parameters to read them."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PretrainedConfig


def unwrap_model(model: nn.Module) -> nn.Module:
    """The transformers model inside PEFT / DDP / compile wrappers."""
    from torch import nn  # here, not at the top: `import constrained_sft.utils` (the CLI's help) stays torch-free

    for _ in range(4):
        if callable(base := getattr(model, "get_base_model", None)):  # PEFT
            model = base()
        elif isinstance(inner := getattr(model, "module", None), nn.Module):  # DDP, DeepSpeed's engine
            model = inner
        elif isinstance(compiled := getattr(model, "_orig_mod", None), nn.Module):  # torch.compile
            model = compiled
        else:
            break
    return model


def model_text_config(model: nn.Module) -> PretrainedConfig:
    """The text config of the transformers model inside `model`'s wrappers (a multimodal model's language model's)."""
    from transformers import PretrainedConfig

    base = unwrap_model(model)
    config = getattr(base, "config", None)
    if not isinstance(config, PretrainedConfig):
        raise TypeError(f"{type(base).__name__} has no transformers config (`.config`).")
    return config.get_text_config()


def zero3_gathered(*params: torch.Tensor | None) -> AbstractContextManager[object]:
    """
    TRL's `maybe_gather_lm_head_ctx` (gather under DeepSpeed ZeRO-3, else a no-op) for the parameters ZeRO-3 has
    converted (they carry `ds_id`). A model built before the config enabled ZeRO-3 (outside `deepspeed.zero.Init`)
    keeps whole, plain parameters until the trainer prepares it, and the trainer measures it before that (sigma_x):
    TRL's helper would fail on them, and they need no gather.
    """
    from torch import nn
    from trl.trainer.utils import maybe_gather_lm_head_ctx

    gathered: AbstractContextManager[object] = maybe_gather_lm_head_ctx(
        *[p for p in params if isinstance(p, nn.Parameter) and hasattr(p, "ds_id")]
    )
    return gathered
