"""
The per-example loss of the readout contract: what f_l averages over a batch. Each maps the readout's predictions of
one layer and the targets to one loss per example `[B]`; the trainer sums them per layer and divides by the number
of examples. A loss is a [`ReadoutLoss`]: besides the values, it says what targets it takes (checked before training,
or batch by batch for a stream) and whether a top-1 accuracy means something for it. `CrossEntropy` for class labels
(logits `[B, C]`, labels `[B]`), `SquaredError` for real-valued targets (predictions and targets of the same shape
`[B, ...]`, the mean over everything but the batch: a layer's mean squared error, as the paper's video denoisers are
scored); a plain function `(predictions, targets) -> [B]` is a `ReadoutLoss` that checks nothing and reports no
accuracy, and a subclass of one's own can declare both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from types import MappingProxyType

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


class ReadoutLoss(ABC):
    """
    A per-example loss and what it knows about its targets. Subclasses set `name`, `reports_accuracy` (the trainer
    then logs the top-1 accuracy of the predictions' argmax) and implement `__call__`, and may implement
    `target_problem` so that bad targets are refused before training.
    """

    name: str = "custom"
    reports_accuracy: bool = False

    @abstractmethod
    def __call__(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """`[B, ...]` predictions of one layer and their targets -> `[B]` losses."""

    def target_problem(self, values: torch.Tensor, num_labels: int | None) -> tuple[torch.Tensor, str] | None:
        """(rows whose targets this loss cannot take `[N]` bool, what is allowed) for `values` `[N, k]` float64;
        None when this loss does not check its targets."""
        return None


class CrossEntropy(ReadoutLoss):
    name, reports_accuracy = "cross_entropy", True

    def __call__(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return cross_entropy(predictions, targets)

    def target_problem(self, values: torch.Tensor, num_labels: int | None) -> tuple[torch.Tensor, str] | None:
        top = (num_labels or 0) - 1
        if top < 0:
            return None  # the head's class count is unknown
        bad = (values != values.round()).any(-1) | (values < 0).any(-1) | (values > top).any(-1)
        return bad, f"class ids 0..{top} (the head's `num_labels`={num_labels})"


class SquaredError(ReadoutLoss):
    name = "squared_error"

    def __call__(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return squared_error(predictions, targets)

    def target_problem(self, values: torch.Tensor, num_labels: int | None) -> tuple[torch.Tensor, str] | None:
        return ~torch.isfinite(values).all(-1), "finite numbers (regression targets)"


class FunctionLoss(ReadoutLoss):
    """A user's function `(predictions, targets) -> [B]`: its targets are not checked and no accuracy is reported."""

    def __init__(self, function: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        self.function = function
        self.name = getattr(function, "__name__", "custom")

    def __call__(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.function(predictions, targets)


# A fixed table, read-only (`MappingProxyType`): its entries are records (values), not classes a plug-in registers, so
# `utils.registry.Registry`, which checks classes, is not theirs; another one is another row here.
PER_EXAMPLE_LOSSES: Mapping[str, ReadoutLoss] = MappingProxyType(
    {loss.name: loss for loss in (CrossEntropy(), SquaredError())}
)


def readout_loss(loss: str | ReadoutLoss | Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> ReadoutLoss:
    """A name in `PER_EXAMPLE_LOSSES`, a `ReadoutLoss`, or a function `(predictions, targets) -> [B]` of the user's."""
    if isinstance(loss, ReadoutLoss):
        return loss
    if callable(loss):
        return FunctionLoss(loss)
    if loss not in PER_EXAMPLE_LOSSES:
        raise ReadoutError(
            f"`loss` must be one of {list(PER_EXAMPLE_LOSSES)}, a ReadoutLoss or a function, got {loss!r}."
        )
    return PER_EXAMPLE_LOSSES[loss]
