"""
The per-example loss of the readout contract: what f_l averages over a batch. Each maps the readout's predictions of
one layer and the targets to one loss per example `[B]`; the trainer sums them per layer and divides by the number
of examples. `cross_entropy` for class labels (logits `[B, C]`, labels `[B]`), `squared_error` for real-valued
targets (predictions and targets of the same shape `[B, ...]`, the mean over everything but the batch: a layer's
mean squared error, as the paper's video denoisers are scored).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .base import ReadoutError


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """`[B, C]`, `[B]` class ids -> `[B]` nats, computed in fp32."""
    return F.cross_entropy(logits.float(), labels, reduction="none")


def squared_error(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """`[B, ...]`, same shape (a trailing 1 of a one-output head is dropped) -> `[B]` mean squared error, in fp32."""
    if predictions.dim() == targets.dim() + 1 and predictions.shape[-1] == 1:
        predictions = predictions.squeeze(-1)
    if predictions.shape != targets.shape:
        raise ReadoutError(
            f"squared_error needs predictions and targets of one shape, got {tuple(predictions.shape)} and "
            f"{tuple(targets.shape)}."
        )
    error = (predictions.float() - targets.float()) ** 2
    return error.reshape(error.shape[0], -1).mean(1)


PER_EXAMPLE_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cross_entropy": cross_entropy,
    "squared_error": squared_error,
}


def per_example_loss(loss: str | Callable) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A name in `PER_EXAMPLE_LOSSES`, or a callable `(predictions, targets) -> [B]` of the user's."""
    if callable(loss):
        return loss
    if loss not in PER_EXAMPLE_LOSSES:
        raise ReadoutError(f"`loss` must be one of {list(PER_EXAMPLE_LOSSES)} or a callable, got {loss!r}.")
    return PER_EXAMPLE_LOSSES[loss]
