"""
A training step's FLOPs as `step_time.py` prices them beside its measured time. "FLOP x" estimates a step's FLOPs
relative to plain SFT: TRL's `compute_flops_per_token` (6 x params x tokens plus attention; 4 x with LoRA's frozen
base) and each extra readout as 6 x D x V per token read (forward 2, backward 4; 4 with a frozen head), plus 2 x D x V
where the kernel recomputes logits in its backward, or 2 x D x V when only measured. "TFLOP/s" divides each setting's estimated FLOPs by its measured time: a setting whose extra
FLOPs run at the base's rate has the same TFLOP/s as plain SFT; a lower figure is time that is not arithmetic (host
work, syncs, memory traffic), a higher one means the base runs below the readout's GEMM efficiency.

Imported by `step_time.py` as a sibling module, after it has put a `--baseline-code` checkout first on the path: the
trainer's own token budget (`auto_tokens_per_sequence`) is the measured code's.
"""

from __future__ import annotations

from trl.trainer.utils import compute_flops_per_token

from constrained_sft.trainers import auto_tokens_per_sequence


def sft_flops(config, args) -> float:
    """A plain SFT step's FLOPs: TRL's per-token estimate (forward + backward) x tokens, 4/6 of it with LoRA (frozen
    base and head: no weight gradients, backward = 2 x forward)."""
    return compute_flops_per_token(config, args.seq) * args.batch * args.seq * (4 / 6 if args.lora else 1)


def flop_estimate(config, args, setting: str) -> tuple[float, float]:
    """
    Estimated step FLOPs relative to plain SFT: (lower bound, with the kernel's recomputation). Each token read
    costs 6 x D x V per layer at least (forward 2, backward dx 2 and dW 2; 4 with a frozen head); a kernel that
    recomputes the logits in the backward instead of keeping `[K, V]` probabilities (all GPU kernels, and the CPU
    one above `KEEP_ELEMENTS`) adds another 2 x D x V.
    """
    from constrained_sft.readout.linear_nll import KEEP_ELEMENTS

    if setting == "sft":
        return 1.0, 1.0
    base = sft_flops(config, args)
    readouts = config.num_hidden_layers - 1
    per_token = (4 if args.lora else 6) * config.hidden_size * config.vocab_size  # per token read and layer
    if setting in ("none", "auto"):  # the trainer's own rule: `readout_budget` 0.1, k tokens per sequence
        k = auto_tokens_per_sequence(
            config, (config.vocab_size, config.hidden_size), readouts, (args.batch, args.seq), args.batch, 0.1
        )
    else:
        k = args.seq if setting == "all" else int(setting)
    # 'all' reads the T - 1 supervised next-token positions of a sequence (every one is, in this random batch); a
    # sample of k >= T - 1 reads the layers whole, all T positions (the last one a weight-0 row)
    per_sequence = args.seq - 1 if setting == "all" else (k if k < args.seq - 1 else args.seq)
    read = per_sequence * args.batch
    if setting == "none":  # measured without grad: forward only, nothing recomputed
        return (base + readouts * per_token / 3 * read) / base, (base + readouts * per_token / 3 * read) / base
    rows = readouts * read  # every layer below the last, stacked into one readout call
    recompute = args.device != "cpu" or rows * config.vocab_size > KEEP_ELEMENTS
    extra = 2 * config.hidden_size * config.vocab_size if recompute else 0
    return (base + rows * per_token) / base, (base + rows * (per_token + extra)) / base
