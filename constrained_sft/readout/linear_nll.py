"""
Per-token NLL of a linear readout, `-log softmax(x @ W.T + b)[target]`, without keeping `[K, V]` logits alive.

Cost per token and vocabulary entry (D = hidden size): forward 2D FLOPs; backward 4D (dx and dW). Three regimes by
`K * V`: small (<= `NATIVE_ELEMENTS`, 16 MiB of fp32 logits) goes through torch's own `linear` + `cross_entropy`,
whose few fused ops cost less than this kernel's per-call Python there; medium (<= `KEEP_ELEMENTS`) keeps the softmax
probabilities from the forward and reuses them in place (sampled tokens: no recomputation, one `[K, V]` block where
torch's path holds two in its backward); large recomputes them chunk by chunk in the backward (all tokens: the extra
peak memory is one chunk of `[C, V]`).

Precision: the matmuls run in the head's dtype (fp32, bf16 or fp16), softmax and the weight gradient accumulate in
fp32, and autocast is off inside (an fp16 head under a bf16 autocast would otherwise meet fp32 gradients), so the
result does not depend on whether the caller runs under autocast.

Why hand-written: on a CPU, at the sampled sizes the readouts use, torch's chunked `F.linear_cross_entropy` is
several times slower and its reference path holds every `[K, V]` block, and TRL's chunked kernel is slower than this
one; at all tokens this kernel is faster than the chunked one, at about a tenth of the reference path's memory. The
figures, from `benchmarks/readout_kernels.py`, are in the performance guide ("Readout kernels") and
`benchmarks/results/readout_kernels_cpu.json`. Off CPU the readout uses TRL's kernel (see `CausalLMReadout`).
"""

from __future__ import annotations

from typing import Any

import torch

# At most this many logits: torch's own kernels (see the module docstring)
NATIVE_ELEMENTS = 2**22
# Keep the forward's probabilities when they take at most this many elements (128 MiB in fp32: the stacked sample of
# every layer, e.g. SmolLM2's 29 layers x 16 tokens x 49k); else recompute them in the backward.
KEEP_ELEMENTS = 2**25
# Token chunk so that one [C, V] fp32 block is about this many elements (64 MiB).
CHUNK_ELEMENTS = 16 * 2**20


def _chunks(K: int, V: int) -> list[tuple[int, int]]:
    size = max(1, min(K, CHUNK_ELEMENTS // max(V, 1)))
    return [(s, min(s + size, K)) for s in range(0, K, size)]


def _probabilities(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, scale: float) -> torch.Tensor:
    """`[C, V]` fp32 log-probabilities, computed in place on one logits block (the matmul in the head's dtype)."""
    logits = torch.nn.functional.linear(x.to(weight.dtype), weight, bias).float()
    if scale != 1.0:
        logits.mul_(scale)
    return logits.sub_(torch.logsumexp(logits, dim=-1, keepdim=True))


class LinearNLL(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        scale: float,
        keep: bool,
    ) -> torch.Tensor:
        K, V = x.shape[0], weight.shape[0]
        nll = x.new_empty(K, dtype=torch.float32)
        kept = []
        with torch.autocast(x.device.type, enabled=False):
            for s, e in _chunks(K, V):
                logp = _probabilities(x[s:e], weight, bias, scale)  # [C, V]
                nll[s:e] = -logp.gather(1, targets[s:e, None]).squeeze(1)
                if keep:
                    kept.append(logp.exp_())  # probabilities, reused by the backward
        ctx.save_for_backward(x, weight, bias, targets)
        ctx.kept, ctx.scale = kept if keep else None, scale
        return nll

    @staticmethod
    def backward(ctx: Any, grad_nll: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, bias, targets = ctx.saved_tensors
        K, V = x.shape[0], weight.shape[0]
        grad_x = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        grad_w = grad_b = None
        with torch.autocast(x.device.type, enabled=False):
            for i, (s, e) in enumerate(_chunks(K, V)):
                p = ctx.kept[i] if ctx.kept is not None else _probabilities(x[s:e], weight, bias, ctx.scale).exp_()
                # d nll / d logits = softmax - onehot, times the upstream gradient and the logit scale
                p[torch.arange(e - s, device=p.device), targets[s:e]] -= 1.0
                p.mul_(grad_nll[s:e, None].float() * ctx.scale)
                if grad_x is not None:
                    grad_x[s:e] = (p.to(weight.dtype) @ weight).to(x.dtype)  # [C, D]
                if ctx.needs_input_grad[1]:  # fp32 accumulation over chunks; one chunk writes it without a zero fill
                    grad_w = p.t() @ x[s:e].float() if grad_w is None else grad_w.addmm_(p.t(), x[s:e].float())
                if bias is not None and ctx.needs_input_grad[2]:
                    grad_b = p.sum(0) if grad_b is None else grad_b.add_(p.sum(0))
        ctx.kept = None
        return (
            grad_x,
            None if grad_w is None else grad_w.to(weight.dtype),
            None if grad_b is None else grad_b.to(bias.dtype),
            None,
            None,
            None,
        )


def linear_nll(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor, scale: float = 1.0
) -> torch.Tensor:
    """`[K]` fp32 NLL of `targets` `[K]` under `x` `[K, D]` @ `weight` `[V, D]`.T (+ `bias`), times `scale`."""
    if x.shape[0] == 0:
        return x.new_zeros(0, dtype=torch.float32)
    if x.shape[0] * weight.shape[0] <= NATIVE_ELEMENTS:
        with torch.autocast(x.device.type, enabled=False):  # the same precision as the kernel below
            logits = torch.nn.functional.linear(x.to(weight.dtype), weight, bias).float()
            logits = logits * scale if scale != 1.0 else logits
            return torch.nn.functional.cross_entropy(logits, targets, reduction="none")
    # Probabilities are kept only when a backward will use them and they are small (see KEEP_ELEMENTS)
    keep = torch.is_grad_enabled() and x.shape[0] * weight.shape[0] <= KEEP_ELEMENTS
    nll: torch.Tensor = LinearNLL.apply(x, weight, bias, targets, scale, keep)  # type: ignore[no-untyped-call]
    return nll  # (torch types `Function.apply` untyped: its arguments are the subclass's `forward`'s)
