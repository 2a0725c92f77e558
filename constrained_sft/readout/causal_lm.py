"""The shared readout psi of a causal LM: the model's own final norm and LM head, applied to any layer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from trl.kernels import ChunkedLogProbFunction

from ..utils.modules import unwrap_model, zero3_gathered
from .base import ReadoutError
from .linear_nll import linear_nll

# Attribute names of the final norm on the text decoder, across HF architectures (Llama/Qwen2/Mistral/Gemma: `norm`;
# GPT-2/Falcon/Bloom: `ln_f`; GPT-NeoX: `final_layer_norm`; Phi: `final_layernorm`; Mamba: `norm_f`). Others (LFM2's
# `embedding_norm`) are found by what they do: see `_final_norm`.
FINAL_NORM_NAMES = ("norm", "ln_f", "final_layer_norm", "final_layernorm", "norm_f", "final_norm")
# Vocabulary tile width, TRL's own (`_CHUNKED_LOGPROB_CHUNK_SIZE`), so that on CUDA every layer, the last one scored by
# TRL's fused head included, goes through the same kernel with the same tiles and rounding.
VOCAB_CHUNK = 32768


def _logit_transform(config: Any) -> tuple[float, float | None]:
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


def _text_decoder(model: nn.Module) -> nn.Module | None:
    """The module that turns token ids into the last hidden state: `get_decoder()` (the language model of a
    vision-language model), else the backbone."""
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    if not isinstance(decoder, nn.Module) or decoder is model:
        decoder = getattr(model, "base_model", None)
    return decoder if isinstance(decoder, nn.Module) and decoder is not model else None


@torch.no_grad()
def _final_norm(decoder: nn.Module) -> nn.Module | None:
    """
    The norm applied to the last layer's output: a child named as in `FINAL_NORM_NAMES`, else the child of the
    decoder (outside its layer stack) whose output is the decoder's last hidden state on a two-token probe batch.
    """
    named = next(
        (getattr(decoder, n) for n in FINAL_NORM_NAMES if isinstance(getattr(decoder, n, None), nn.Module)), None
    )
    if isinstance(named, nn.Module):
        return named
    outputs: dict[str, torch.Tensor] = {}
    handles = [
        child.register_forward_hook(lambda _m, _a, out, name=name: outputs.__setitem__(name, out))
        for name, child in decoder.named_children()
        if not isinstance(child, nn.ModuleList)
    ]
    weight = next(decoder.parameters(), None)
    try:
        ids = torch.tensor([[1, 2]], device=weight.device if weight is not None else "cpu")
        last = decoder(input_ids=ids, use_cache=False).last_hidden_state
    except Exception:  # noqa: BLE001 - a decoder that cannot run on a bare probe batch: fall back to the error
        return None
    finally:
        for handle in handles:
            handle.remove()
    found = [
        n for n, out in outputs.items() if torch.is_tensor(out) and out.shape == last.shape and torch.equal(out, last)
    ]
    return getattr(decoder, found[-1]) if found else None


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
        head_of = getattr(base, "get_output_embeddings", None)
        lm_head = head_of() if callable(head_of) else None
        if lm_head is None or not isinstance(getattr(lm_head, "weight", None), torch.Tensor):
            raise ReadoutError(f"{name} has no LM head (`get_output_embeddings()` returned {lm_head!r}). {hint}")
        decoder = _text_decoder(base)
        norm = _final_norm(decoder) if decoder is not None else None
        if norm is None:
            raise ReadoutError(
                f"Could not find the final norm of {name}: its text decoder has none of the attributes "
                f"{list(FINAL_NORM_NAMES)}, and no module of it produced the last hidden state on a probe batch. "
                f"{hint}"
            )
        scale, softcap = _logit_transform(base.config)
        return cls(lm_head=lm_head, final_norm=norm, logit_scale=scale, final_logit_softcapping=softcap)

    @property
    def head_shape(self) -> tuple[int, int]:
        """(V, D) of the LM head's weight, whole even where DeepSpeed ZeRO-3 leaves this rank an empty partition
        (`ds_shape`; an FSDP2 DTensor reports its global shape)."""
        weight = self.weight
        vocab, dim = getattr(weight, "ds_shape", weight.shape)
        return vocab, dim

    @property
    def weight(self) -> torch.Tensor:
        """The LM head's weight `[V, D]` (a DTensor under FSDP2, this rank's partition under ZeRO-3)."""
        weight = self.lm_head.weight
        if not isinstance(weight, torch.Tensor):
            raise ReadoutError(f"the readout's LM head {type(self.lm_head).__name__} has no weight tensor.")
        return weight

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
        weight, bias = self.weight, getattr(self.lm_head, "bias", None)
        # the head's precision, with or without autocast (the kernels accumulate in fp32), on the head's device
        x, targets = x.to(weight.device, weight.dtype), targets.to(weight.device)
        sharded = hasattr(weight, "full_tensor") or hasattr(weight, "ds_id")
        if not sharded and self.final_logit_softcapping is None and x.device.type == "cpu":
            return linear_nll(x, weight, bias, targets, self.logit_scale)
        if hasattr(weight, "full_tensor"):  # FSDP2 shards parameters as DTensors
            weight = weight.full_tensor()
            bias = bias.full_tensor() if bias is not None else None
        with zero3_gathered(weight, bias):  # no-op unless DeepSpeed ZeRO-3 partitions the head
            log_probs: torch.Tensor = ChunkedLogProbFunction.apply(  # type: ignore[no-untyped-call]
                x, weight, bias, targets, 1.0, VOCAB_CHUNK, self.final_logit_softcapping, self.logit_scale, ()
            )[0]  # (torch types `Function.apply` untyped)
        return -log_probs
