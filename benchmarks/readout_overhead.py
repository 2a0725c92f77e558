"""
How much of the intermediate readouts' time is per-op overhead a fused kernel could remove, on one small shape.

    python benchmarks/readout_overhead.py                   # the tiny benchmark model's default: 3 layers x 1024 rows
    python benchmarks/readout_overhead.py --rows 4          # a sample of 4 tokens per sequence: 16 rows per layer

The library's path (`layers_token_nll`: the selected rows of every layer (the layer's own view when read whole), the
model's RMSNorm module, the head through `linear_nll`; then `aggregate` and a weighted sum, as the penalty does) against
a hand-fused reference: one autograd Function for the gather, RMSNorm, head and NLL with a hand-written backward. Both
run about the same ATen ops per forward + backward (69 against 74 at the default's 3 x 1024 rows, 78 against 83 at 16
rows per layer: the work itself is the same), but the reference records one autograd node for the readout where the
library's path records one per differentiable op, so the difference is autograd's per-node bookkeeping. The reference is
Llama's RMSNorm only and lives here, not in the library: it measures what fusion could save, so that the choice not to
fuse rests on a number. Protocol: both paths warm up, then `--repeats` rounds of `--calls` calls each, alternating
(drift hits both alike); the median call per round, then the median and [min, max] over rounds. Agreement: the largest
gradient difference between the two paths.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn
from transformers.models.llama.modeling_llama import LlamaRMSNorm

import constrained_sft
from constrained_sft.readout import CausalLMReadout, select_tokens
from constrained_sft.readout.layer_losses import aggregate, layers_token_nll


class FusedRMSNormReadout(torch.autograd.Function):
    """`[n, K]` NLL of n layers' `[B, T, D]` hidden states at `positions` under lm_head(RMSNorm(h)), one node;
    `whole`: every position in order (K = B x T), read as the layers' own views like `TokenSelection.hidden_rows`."""

    @staticmethod
    def forward(ctx, norm_weight, head_weight, positions, targets, eps, whole, *hiddens):
        flat = [h.reshape(-1, h.size(-1)) for h in hiddens]
        x = torch.stack(flat if whole else [f.index_select(0, positions) for f in flat])  # [n, K, D]
        rstd = x.pow(2).mean(-1, keepdim=True).add_(eps).rsqrt_()  # [n, K, 1]
        normed = x * rstd
        y = normed * norm_weight
        log_probs = torch.log_softmax(y @ head_weight.t(), -1)  # [n, K, V]
        nll = -log_probs.gather(-1, targets.expand(len(hiddens), -1)[..., None]).squeeze(-1)
        ctx.save_for_backward(norm_weight, head_weight, positions, targets, normed, rstd, y, log_probs)
        ctx.shape, ctx.whole = hiddens[0].shape, whole
        return nll

    @staticmethod
    def backward(ctx, grad):
        norm_weight, head_weight, positions, targets, normed, rstd, y, log_probs = ctx.saved_tensors
        n = grad.shape[0]
        p = log_probs.exp()  # d nll / d logits = softmax - onehot
        p.scatter_add_(-1, targets.expand(n, -1)[..., None], p.new_full((n, targets.numel(), 1), -1.0))
        p.mul_(grad[..., None])
        grad_head = p.reshape(-1, p.size(-1)).t() @ y.reshape(-1, y.size(-1))
        grad_y = p @ head_weight
        grad_norm = (grad_y * normed).sum((0, 1))
        grad_normed = grad_y * norm_weight
        grad_x = rstd * (grad_normed - normed * (grad_normed * normed).mean(-1, keepdim=True))
        B, T, D = ctx.shape
        if ctx.whole:
            grads = [grad_x[i].view(B, T, D) for i in range(n)]
        else:
            grads = [grad_x.new_zeros(B * T, D).index_add_(0, positions, grad_x[i]).view(B, T, D) for i in range(n)]
        return (grad_norm, grad_head, None, None, None, None, *grads)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=3, help="layers read out below the last (tiny model: 3)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=32)
    parser.add_argument(
        "--rows",
        type=int,
        default=None,
        help="tokens sampled per sequence (default: T - 1, which the tiny model's 'auto' k covers: the layers are "
        "read whole)",
    )
    parser.add_argument("--calls", type=int, default=200, help="calls per round")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--out", default=None, help="write the result as JSON here")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(0)
    norm = LlamaRMSNorm(args.hidden, eps=1e-6)  # the tiny benchmark model's own
    head = nn.Linear(args.hidden, args.vocab, bias=False)
    readout = CausalLMReadout(lm_head=head, final_norm=norm)
    labels = torch.randint(0, args.vocab, (args.batch, args.seq))
    rows = args.rows if args.rows is not None else args.seq - 1
    selection = select_tokens(labels, per_sequence=rows, seed=1)
    hiddens = [torch.randn(args.batch, args.seq, args.hidden, requires_grad=True) for _ in range(args.layers)]
    coefficients = torch.rand(args.layers)  # the multipliers' weights on the layer sums
    params = [*hiddens, norm.weight, head.weight]

    def library():
        nll = layers_token_nll(hiddens, selection, readout, apply_norm=True)
        (aggregate(nll, selection).sums * coefficients).sum().backward()

    def fused():
        nll = FusedRMSNormReadout.apply(
            norm.weight,
            head.weight,
            selection.positions,
            selection.targets,
            norm.variance_epsilon,
            selection.whole_layer,
            *hiddens,
        )
        (aggregate(nll, selection).sums * coefficients).sum().backward()

    paths = {"library": library, "fused reference": fused}
    grads = {}
    for name, run in paths.items():
        for p in params:
            p.grad = None
        run()
        grads[name] = [p.grad.clone() for p in params]
    difference = max((a - b).abs().max().item() for a, b in zip(*grads.values(), strict=True))
    rounds = {name: [] for name in paths}
    for _ in range(args.repeats):
        for name, run in paths.items():
            times = []
            for _ in range(args.calls):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            rounds[name].append(statistics.median(times) * 1e6)
    result = {
        "shape": {k: getattr(args, k) for k in ("layers", "batch", "seq", "hidden", "vocab", "rows")},
        "rows_per_layer": selection.index.numel(),
        "whole_layer": selection.whole_layer,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "constrained_sft": constrained_sft.__version__,
        "max_gradient_difference": difference,
        "us_per_call": {
            name: {"median": statistics.median(v), "min": min(v), "max": max(v)} for name, v in rounds.items()
        },
    }
    lib, ref = (result["us_per_call"][n]["median"] for n in paths)
    result["saved_by_fusion_us"] = lib - ref
    print(
        f"{args.layers} layers x {result['rows_per_layer']} rows, D {args.hidden}, V {args.vocab}, "
        f"{result['threads']} threads; forward + backward per call (median of {args.repeats} rounds):"
    )
    for name, row in result["us_per_call"].items():
        print(f"  {name:16s} {row['median']:8.0f} us  [{row['min']:.0f}, {row['max']:.0f}]")
    print(f"  fusion saves {lib - ref:.0f} us ({(lib - ref) / lib:.0%}); max gradient difference {difference:.2g}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
