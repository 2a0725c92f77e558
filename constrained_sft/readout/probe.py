"""
Measuring every constrained layer inside the model's own forward.

TRL's fused forward runs the backbone and scores the last layer without returning hidden states. A probe attached to
a model wraps that forward once: while a trainer serves a request (`with probe.serving(model, request):`) the
wrapper asks the backbone for hidden states, catches them with a forward hook, and reads out the constrained layers
before the forward returns, so that wrappers which gather parameters only during the forward (DeepSpeed ZeRO-3,
FSDP) see the LM head and norm gathered, and mixed-precision wrappers that accelerate installs later run the readout
under their autocast too. Outside a request (generation, plain calls) the forward is the model's own.

A model carries one active wrapper however many probes (trainers) are attached to it; each request is served by the
probe that opened it, so a model handed to two trainers behaves like a model handed to one. TRL's fused LM head
calls the backbone directly and re-wraps the forward at every `SFTTrainer.__init__`, which would cut out a wrapper
below it: attaching then moves the probes to a new wrapper on top, and the one below passes every call through.
Detaching the last probe restores the forward the model had before.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from ..constraints.stats import LayerLosses
from .base import ReadoutError
from .causal_lm import CausalLMReadout
from .layer_losses import aggregate, layer_token_nll, layers_token_nll, stacked_layers
from .tokens import TokenSelection

HOOK_ATTRIBUTE = "_constrained_sft_probe_hook"


@dataclass
class ProbeRequest:
    selection: TokenSelection
    grad: bool  # read the layers with autograd (constraints active) or only measure them
    shape: tuple[int, int]  # [B, T] of the labels
    # an upper bound on the selection's rows K that every data-parallel rank shares (known from the config alone),
    # or None; with a sharded head it spares the all-reduce that sizes the stacked calls when one call fits
    max_rows: int | None = None
    result: LayerLosses | None = None


class LayerProbe:
    def __init__(
        self,
        readout: CausalLMReadout,
        layers: tuple[int, ...],
        num_layers: int,
        final_norm: bool,
        sharded: bool = True,
    ) -> None:
        self.readout = readout
        self.layers = layers
        self.num_layers = num_layers
        # the constrained layers read out through `readout` (the last layer's loss is the objective's own)
        self.below = tuple(layer for layer in layers if layer < num_layers)
        self.final_norm = final_norm
        # Whether the head may be gathered per readout call (DeepSpeed, FSDP): every rank must then make the same
        # calls: one when the request's shared bound `max_rows` says every layer fits in it, else as many as the
        # largest selection of all ranks needs (an all-reduce and a read per forward). Plain data parallelism gathers
        # nothing in a readout, so each rank sizes its calls from its own selection.
        self.sharded = sharded
        self.verified = False

    def attach(self, model: nn.Module) -> None:
        """Let this probe serve requests on `model` (a transformers model, after TRL's fused LM head); idempotent."""
        _ForwardHook.outermost(model).probes.add(self)

    def detach(self, model: nn.Module) -> None:
        """Stop serving `model`; the last probe to leave restores the model's own forward. Idempotent."""
        hook = _ForwardHook.of(model)
        if hook is not None:
            hook.probes.discard(self)
            if not hook.probes:
                hook.remove(model)

    @contextmanager
    def serving(self, model: nn.Module, request: ProbeRequest | None) -> Iterator[ProbeRequest | None]:
        """Inside the block, the first forward of `model` fills `request.result`. Without a request: a no-op."""
        if request is None:
            yield None
            return
        hook = _ForwardHook.of(model)
        if hook is None or self not in hook.probes:
            raise ReadoutError(f"This probe is not attached to {type(model).__name__}; call `probe.attach(model)`.")
        outer, hook.active = hook.active, (self, request)
        try:
            yield request
        finally:
            hook.active = outer

    def measure(self, hidden_states: tuple[torch.Tensor, ...], output: Any, request: ProbeRequest) -> LayerLosses:
        """
        The constrained layers' losses on the request's tokens. Every data-parallel rank makes the same readout calls
        whatever its data (an empty selection reads one dummy row; with a `sharded` head every rank makes one call
        when the request's `max_rows` lets every layer fit in it, else the stacking is sized by the largest selection
        of all ranks): under ZeRO-3 / FSDP each call gathers the LM head, a collective.
        """
        L = self.num_layers
        if len(hidden_states) != L + 1:
            raise ReadoutError(
                f"The backbone returned {len(hidden_states)} hidden states, expected num_hidden_layers + 1 = {L + 1}."
            )
        selection = request.selection.padded()
        below = self.below
        with nullcontext() if request.grad else torch.no_grad():
            # the layers below the last stacked into as few readout calls as possible: [n_below, K]
            per_call = self._layers_per_call(len(below), selection.index.numel(), request, hidden_states[0].device)
            nll = layers_token_nll(
                [hidden_states[i] for i in below], selection, self.readout, self.final_norm, per_call
            )
            if L in self.layers:
                last = self._last_layer_nll(hidden_states, output, request, selection)
                nll = torch.cat([nll, last[None]]) if below else last[None]
        if not self.verified:
            self._verify(hidden_states[L], output, request, selection)
        return aggregate(nll, selection)  # sums [n], per-sequence [n, S]

    def _layers_per_call(self, layers: int, rows: int, request: ProbeRequest, device: torch.device) -> int | None:
        """Layers per stacked readout call: this rank's own choice (None), or with a sharded head one all ranks share
        (all of them when the shared bound fits one call: no collective; else sized by the largest selection)."""
        if not (layers and self.sharded):
            return None
        if request.max_rows is not None and stacked_layers(request.max_rows) >= layers:
            return layers  # one call on every rank, whatever its data
        return stacked_layers(_largest_across_ranks(rows, device))

    def _last_layer_nll(
        self, hidden_states: tuple[torch.Tensor, ...], output: Any, request: ProbeRequest, selection: TokenSelection
    ) -> torch.Tensor:
        # Reuse the per-token log-probs the objective already paid for, when they carry the graph
        layer = self.num_layers
        log_probs = self._fused_log_probs(output, request)
        if log_probs is not None and (log_probs.requires_grad or not request.grad):
            return -log_probs.reshape(-1)[selection.index].float()
        return layer_token_nll(hidden_states[layer], selection, self.readout, apply_norm=False)

    @staticmethod
    def _fused_log_probs(output: Any, request: ProbeRequest) -> torch.Tensor | None:
        log_probs = getattr(output, "log_probs", None)
        B, T = request.shape
        return log_probs if log_probs is not None and tuple(log_probs.shape) == (B, T - 1) else None

    @torch.no_grad()
    def _verify(
        self, last_hidden: torch.Tensor, output: Any, request: ProbeRequest, selection: TokenSelection
    ) -> None:
        """
        Once: the readout of the last hidden state must reproduce the model's own next-token log-probs. Every rank
        runs the readout (a rank without supervised tokens reads its dummy row and checks nothing).
        """
        log_probs = self._fused_log_probs(output, request)
        if log_probs is None:
            return
        index = selection.index[:16]
        h = selection.hidden_rows(last_hidden)[:16]  # once per run: gathering every selected row is no cost
        ours = -self.readout.token_nll(h, selection.targets[:16], apply_norm=False)
        real = selection.weight[:16].to(ours.device) > 0
        theirs = log_probs.reshape(-1)[index].float().to(ours.device)
        if not torch.allclose(ours[real], theirs[real], rtol=1e-3, atol=1e-3):
            raise ReadoutError(
                "The readout of the last hidden state does not reproduce the model's own log-probabilities "
                f"(max difference {(ours - theirs)[real].abs().max().item():.3g}): this architecture's last "
                "hidden state or LM head differ from what CausalLMReadout assumes. Pass a custom `readout=`."
            )
        self.verified = True


def _largest_across_ranks(rows: int, device: torch.device) -> int:
    """The largest `rows` of all data-parallel ranks (a collective every rank enters), or `rows` in one process."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return rows
    value = torch.tensor([rows], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return int(value.item())


class _ForwardHook:
    """The one wrapper around a model's forward, whatever the number of probes attached; serves the active request."""

    def __init__(self, model: nn.Module) -> None:
        self.own = model.__dict__.get("forward")  # an instance-level forward set before us (None: the class's)
        self.probes: set[LayerProbe] = set()
        self.active: tuple[LayerProbe, ProbeRequest] | None = None
        inner, backbone, hook = model.forward, cast(nn.Module, model.base_model), self

        @functools.wraps(type(model).forward)  # `generate` validates its kwargs against this signature
        def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
            if hook.active is None or hook.active[1].result is not None:
                return inner(*args, **kwargs)
            probe, request = hook.active
            kwargs["output_hidden_states"] = True
            caught: list[tuple[torch.Tensor, ...]] = []
            handle = backbone.register_forward_hook(lambda _m, _a, out: caught.append(out.hidden_states))
            try:
                output = inner(*args, **kwargs)
            finally:
                handle.remove()
            if not caught or caught[0] is None:
                raise ReadoutError(f"{type(self).__name__}'s backbone did not return hidden states.")
            request.result = probe.measure(caught[0], output, request)
            return output

        self.forward = types.MethodType(forward, model)

    @classmethod
    def of(cls, model: nn.Module) -> _ForwardHook | None:
        return model.__dict__.get(HOOK_ATTRIBUTE)

    @classmethod
    def outermost(cls, model: nn.Module) -> _ForwardHook:
        """The model's hook, re-installed on top (keeping its probes) if something has wrapped the forward since."""
        hook = cls.of(model)
        if hook is not None and model.__dict__.get("forward") is hook.forward:
            return hook
        new = cls(model)  # wraps whatever the forward is now; a hook left below is never active again
        if hook is not None:
            new.probes = hook.probes
        model.forward = new.forward
        model.__dict__[HOOK_ATTRIBUTE] = new
        return new

    def remove(self, model: nn.Module) -> None:
        """Restore the forward the model had before, unless something wrapped ours since (it then stays and passes
        every call through: no request can be active once no probe is attached)."""
        del model.__dict__[HOOK_ATTRIBUTE]
        if model.__dict__.get("forward") is self.forward:
            if self.own is None:
                del model.forward
            else:
                model.forward = self.own
