"""
What a sweep's trial is scored by on the validation rows (`--objective`), one class per objective, registered in
`SWEEP_OBJECTIVES` (`@SWEEP_OBJECTIVES.register`) like the training modes, dual optimizers and judges: its help (the
flag's text), its score of a trial's summary over the gamma grid, and its direction. Nothing outside this registry
compares objective names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from ..evaluation import ModelSummary
from ..utils.registry import Registry


class SweepObjective(ABC):
    """One `--objective`. `minimized`: lower is better whatever the task's headline (a loss); `floors_accuracy`: it
    needs a headline where higher is better (an accuracy)."""

    name: ClassVar[str]
    help: ClassVar[str]
    minimized: ClassVar[bool] = False
    floors_accuracy: ClassVar[bool] = False

    @staticmethod
    @abstractmethod
    def score(summary: ModelSummary, ood_floor: float) -> float:
        """The trial's score from its summary over the gamma grid."""


# the `--objective` names, in the order they are registered
SWEEP_OBJECTIVES: Registry[SweepObjective] = Registry("sweep objective", SweepObjective, needs=("name", "help"))


@SWEEP_OBJECTIVES.register
class AreaUnderCurve(SweepObjective):
    name = "auc"
    help = "the headline (token accuracy, accuracy or RMSE) over the gamma grid"

    @staticmethod
    def score(summary: ModelSummary, ood_floor: float) -> float:
        return summary.auc


@SWEEP_OBJECTIVES.register
class OutOfDistribution(SweepObjective):
    name = "ood"
    help = "the headline's mean above the training level"

    @staticmethod
    def score(summary: ModelSummary, ood_floor: float) -> float:
        return summary.ood_metric


@SWEEP_OBJECTIVES.register
class InDistributionWithFloor(SweepObjective):
    name = "id_with_ood_floor"
    help = "ID accuracy among trials whose OOD accuracy >= ood_floor (accuracy tasks)"
    floors_accuracy = True

    @staticmethod
    def score(summary: ModelSummary, ood_floor: float) -> float:
        # below the floor, a value under every trial that reaches it
        return summary.id_metric if summary.ood_metric >= ood_floor else summary.ood_metric - 1.0


@SWEEP_OBJECTIVES.register
class HeldOutLoss(SweepObjective):
    name = "loss"
    help = "held-out loss, mean over the grid"
    minimized = True

    @staticmethod
    def score(summary: ModelSummary, ood_floor: float) -> float:
        return summary.loss


def objectives_help() -> str:
    """`--objective`'s help, from the registry."""
    kinds = ", ".join(f"'{name}' ({kind.help})" for name, kind in SWEEP_OBJECTIVES.items())
    return f"Validation score of a trial: {kinds}. Accuracy is maximised; RMSE and loss are minimised."
