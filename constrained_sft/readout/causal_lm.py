"""The shared readout psi of a causal LM: the model's own final norm and LM head, applied to any layer."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from trl.kernels import ChunkedLogProbFunction
from trl.trainer.utils import maybe_gather_lm_head_ctx

from ..utils import unwrap_model
from .base import ReadoutError
from .linear_nll import linear_nll

# Attribute names of the final norm on the backbone, across HF architectures (Llama/Qwen2/Mistral/Gemma: `norm`;
# GPT-2/Falcon/Bloom: `ln_f`; GPT-NeoX: `final_layer_norm`; Phi: `final_layernorm`; Mamba: `norm_f`).
FINAL_NORM_NAMES = ("norm", "ln_f", "final_layer_norm", "final_layernorm", "norm_f", "final_norm")
# Vocabulary tile width, TRL's own (`_CHUNKED_LOGPROB_CHUNK_SIZE`), so that on CUDA every layer, the last one scored by
# TRL's fused head included, goes through the same kernel with the same tiles and rounding.
VOCAB_CHUNK = 32768


def _logit_transform(config) -> tuple[float, float | None]:
    """(logit scale, final softcap) exactly as TRL's fused LM head reads them, so every layer is scored alike."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    softcap = getattr(text, "final_logit_softcapping", None)
    scale = getattr(text, "logit_scale", None)
    if scale is None:
        scale = getattr(text, "output_multiplier", None)
    if scale is None:
        scale = getattr(text, "lm_head_multiplier", None)
    if scale is None and getattr(text, "logits_scaling", None) is not None:
        scale = text.logits_scaling if text.model_type == "hyperclovax" else 1 / text.logits_scaling
    return (1.0 if scale is None else float(scale)), softcap


@dataclass
class CausalLMReadout:
    """
    psi(h) = lm_head(final_norm(h)). Build it with [`CausalLMReadout.from_model`], or by hand for an architecture
    whose norm or head lives elsewhere: `CausalLMReadout(final_norm=model.decoder.final_layer_norm,
    lm_head=model.lm_head)`, passed to the trainer as `readout=`.
    """

    lm_head: nn.Module
    final_norm: nn.Module | None
    logit_scale: float = 1.0
    final_logit_softcapping: float | None = None

    @classmethod
    def from_model(cls, model: nn.Module) -> CausalLMReadout:
        base = unwrap_model(model)
        name = type(base).__name__
        hint = (
            f"Pass `readout=CausalLMReadout(final_norm=<the norm applied before the LM head>, lm_head=<the output "
            f"projection>)` to the trainer to read out {name}'s layers."
        )
        lm_head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
        if lm_head is None or not isinstance(getattr(lm_head, "weight", None), torch.Tensor):
            raise ReadoutError(f"{name} has no LM head (`get_output_embeddings()` returned {lm_head!r}). {hint}")
        backbone = getattr(base, "base_model", None)
        norm = next(
            (getattr(backbone, n) for n in FINAL_NORM_NAMES if isinstance(getattr(backbone, n, None), nn.Module)),
            None,
        )
        if backbone is None or backbone is base or norm is None:
            raise ReadoutError(
                f"Could not find the final norm of {name}: its backbone has none of the attributes "
                f"{list(FINAL_NORM_NAMES)}. {hint}"
            )
        scale, softcap = _logit_transform(base.config)
        return cls(lm_head=lm_head, final_norm=norm, logit_scale=scale, final_logit_softcapping=softcap)

    def token_nll(self, hidden: torch.Tensor, targets: torch.Tensor, apply_norm: bool = True) -> torch.Tensor:
        """
        `[K]` fp32 NLL of `targets` `[K]` under psi(hidden `[K, D]`); the logits never exist in full. The kernel is
        the cheapest exact one for the device: on CPU `linear_nll` (probabilities kept for small K, recomputed in
        chunks for large K); elsewhere TRL's chunked kernel, the one TRL's fused head scores the last layer with (so
        f_{L-1} and f_L share their numerics), which also re-gathers a ZeRO-3 LM head in its backward. Cut
        Cross-Entropy is not used: its default gradient filtering is approximate and its logits are rounded
        otherwise, so f_{L-1} and f_L would differ by kernel, not by layer.
        """
        x = self.final_norm(hidden) if apply_norm and self.final_norm is not None else hidden
        weight, bias = self.lm_head.weight, getattr(self.lm_head, "bias", None)
        x = x.to(weight.dtype)  # the head's precision, with or without autocast; the kernels accumulate in fp32
        sharded = hasattr(weight, "full_tensor") or hasattr(weight, "ds_id")
        if not sharded and self.final_logit_softcapping is None:
            x, targets = x.to(weight.device), targets.to(weight.device)
            if x.device.type == "cpu":
                return linear_nll(x, weight, bias, targets, self.logit_scale)
        if hasattr(weight, "full_tensor"):  # FSDP2 shards parameters as DTensors
            weight = weight.full_tensor()
            bias = bias.full_tensor() if bias is not None else None
        x, targets = x.to(weight.device), targets.to(weight.device)
        with maybe_gather_lm_head_ctx(weight, bias):  # no-op unless DeepSpeed ZeRO-3 partitions the head
            log_probs = ChunkedLogProbFunction.apply(
                x, weight, bias, targets, 1.0, VOCAB_CHUNK, self.final_logit_softcapping, self.logit_scale, ()
            )[0]
        return -log_probs
