"""
Measuring every constrained layer inside the model's own forward.

TRL's fused forward runs the backbone and scores the last layer without returning hidden states. The probe wraps that
forward: while a request is pending it asks the backbone for hidden states, catches them with a forward hook, and
reads out the constrained layers before the forward returns, so that wrappers which gather parameters only during
the forward (DeepSpeed ZeRO-3, FSDP) see the LM head and norm gathered. Without a pending request (generation,
plain calls) the forward is untouched.
"""

from __future__ import annotations

import functools
import types
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..constraints.stats import LayerLosses
from .base import ReadoutError
from .causal_lm import CausalLMReadout
from .layer_losses import aggregate, layer_token_nll, layers_token_nll
from .tokens import TokenSelection


@dataclass
class ProbeRequest:
    selection: TokenSelection
    grad: bool  # read the layers with autograd (constraints active) or only measure them
    shape: tuple[int, int]  # [B, T] of the labels
    result: LayerLosses | None = None


class LayerProbe:
    def __init__(self, readout: CausalLMReadout, layers: tuple[int, ...], num_layers: int, final_norm: bool) -> None:
        self.readout = readout
        self.layers = layers
        self.num_layers = num_layers
        self.final_norm = final_norm
        self.pending: ProbeRequest | None = None
        self.verified = False

    @contextmanager
    def serving(self, request: ProbeRequest | None):
        self.pending = request
        try:
            yield request
        finally:
            self.pending = None

    def measure(self, hidden_states: tuple[torch.Tensor, ...], output: Any, request: ProbeRequest) -> LayerLosses:
        L = self.num_layers
        if len(hidden_states) != L + 1:
            raise ReadoutError(
                f"The backbone returned {len(hidden_states)} hidden states, expected num_hidden_layers + 1 = {L + 1}."
            )
        selection = request.selection
        below = [layer for layer in self.layers if layer < L]
        with nullcontext() if request.grad else torch.no_grad():
            # every layer below the last in one readout call: [n_below, K]
            nll = list(layers_token_nll([hidden_states[i] for i in below], selection, self.readout, self.final_norm))
            if L in self.layers:
                nll.append(self._last_layer_nll(hidden_states, output, request))
        if not self.verified:
            self._verify(hidden_states[L], output, request)
        return aggregate(torch.stack(nll), selection)  # sums [n], per-sequence [n, S]

    def _last_layer_nll(self, hidden_states, output: Any, request: ProbeRequest) -> torch.Tensor:
        # Reuse the per-token log-probs the objective already paid for, when they carry the graph
        layer = self.num_layers
        log_probs = self._fused_log_probs(output, request)
        if log_probs is not None and (log_probs.requires_grad or not request.grad):
            return -log_probs.reshape(-1)[request.selection.index].float()
        return layer_token_nll(hidden_states[layer], request.selection, self.readout, apply_norm=False)

    @staticmethod
    def _fused_log_probs(output: Any, request: ProbeRequest) -> torch.Tensor | None:
        log_probs = getattr(output, "log_probs", None)
        B, T = request.shape
        return log_probs if log_probs is not None and tuple(log_probs.shape) == (B, T - 1) else None

    @torch.no_grad()
    def _verify(self, last_hidden: torch.Tensor, output: Any, request: ProbeRequest) -> None:
        """Once: the readout of the last hidden state must reproduce the model's own next-token log-probs."""
        log_probs = self._fused_log_probs(output, request)
        selection = request.selection
        if log_probs is None or selection.index.numel() == 0:
            return
        index = selection.index[:16]
        h = last_hidden[:, :-1].reshape(-1, last_hidden.size(-1))[index]
        ours = -self.readout.token_nll(h, selection.targets[:16], apply_norm=False)
        theirs = log_probs.reshape(-1)[index].float()
        if not torch.allclose(ours, theirs.to(ours.device), rtol=1e-3, atol=1e-3):
            raise ReadoutError(
                "The readout of the last hidden state does not reproduce the model's own log-probabilities "
                f"(max difference {(ours - theirs.to(ours.device)).abs().max().item():.3g}): this architecture's last "
                "hidden state or LM head differ from what CausalLMReadout assumes. Pass a custom `readout=`."
            )
        self.verified = True


def attach_probe(model: nn.Module, probe: LayerProbe) -> None:
    """Wrap `model.forward` (a transformers model, after TRL's fused LM head) to serve the probe's requests."""
    inner = model.forward
    backbone = model.base_model

    @functools.wraps(type(model).forward)  # `generate` validates its kwargs against this signature
    def forward(self, *args, **kwargs):
        request = probe.pending
        if request is None or request.result is not None:
            return inner(*args, **kwargs)
        kwargs["output_hidden_states"] = True
        caught: list[tuple[torch.Tensor, ...]] = []
        handle = backbone.register_forward_hook(lambda _m, _a, out: caught.append(out.hidden_states))
        try:
            output = inner(*args, **kwargs)
        finally:
            handle.remove()
        if not caught or caught[0] is None:
            raise ReadoutError(f"{type(model).__name__}'s backbone did not return hidden states.")
        request.result = probe.measure(caught[0], output, request)
        return output

    model.forward = types.MethodType(forward, model)
