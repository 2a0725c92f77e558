"""The noise levels a comparison measures its arms at: the ones given, else the default grid around the training
level (`noise.NoiseGrid.default`), in increasing order."""

from __future__ import annotations

from ..config import training_level
from ..noise import NoiseGrid


def comparison_levels(given: list[float] | None, training_gamma: object, flag: str = "--gammas") -> list[float]:
    """The levels, sorted: `given` (refused, naming `flag`, unless valid levels) or 0 to 4x the training level."""
    grid = NoiseGrid.parse(given, flag) if given else NoiseGrid.default(training_level(training_gamma))
    return grid.sorted().to_list()
