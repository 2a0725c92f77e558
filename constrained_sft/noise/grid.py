"""
The noise levels of an evaluation as one type, `NoiseGrid`, that every command carries them in once parsed: the
levels in order, how a level names its entry in per-level results (`key`), which levels are in distribution (up to
the training level) and which out of it, and the default grid. Each command's `gammas` field is parsed into one by
`NoiseGrid.parse`, which refuses, naming the flag, an empty grid, a level that is not a finite number >= 0, or a
repeated one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .embedding import EmbeddingNoiseError


@dataclass(frozen=True)
class NoiseGrid:
    """Noise levels gamma, in the order given (each once)."""

    levels: tuple[float, ...]

    @classmethod
    def parse(cls, values: Sequence[float] | float, flag: str = "--gammas") -> NoiseGrid:
        """Levels as floats, in the given order: refused, naming `flag`, unless a non-empty list of finite numbers
        >= 0 in which no level repeats (each level is measured once: a repeat would share one measurement and be
        reported twice)."""
        values = [values] if isinstance(values, (int, float)) else list(values)
        if not values:
            raise EmbeddingNoiseError(f"`{flag}` is empty; give one or more noise levels gamma (finite, >= 0).")
        out = []
        for v in values:
            number = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan
            if not math.isfinite(number) or number < 0:
                raise EmbeddingNoiseError(f"`{flag}` must be finite numbers >= 0 (noise levels gamma), got {v!r}.")
            out.append(number)
        if repeated := sorted({v for v in out if out.count(v) > 1}):
            raise EmbeddingNoiseError(f"`{flag}` repeats the level(s) {repeated}; give each noise level once.")
        return cls(tuple(out))

    @classmethod
    def default(cls, train_gamma: float) -> NoiseGrid:
        """The grid when none is given: 0 to 4x the training level in 5 steps (0, 0.5, ..., 2 without training
        noise), the grid of the paper's classifier comparisons (Appendix B.3)."""
        unit = train_gamma if train_gamma > 0 else 0.5
        return cls(tuple(round(k * unit, 6) for k in range(5)))

    def sorted(self) -> NoiseGrid:
        return NoiseGrid(tuple(sorted(self.levels)))

    @staticmethod
    def key(gamma: float) -> str:
        """The name of a level's entry in per-level results (JSON keys): `str` of the float, '0.5', '1.0'."""
        return str(float(gamma))

    def split(self, train_gamma: float) -> tuple[np.ndarray, np.ndarray]:
        """(in-distribution, out-of-distribution) masks over the levels: gamma <= the training level, and above it."""
        g = np.asarray(self.levels, dtype=np.float64)
        return g <= train_gamma, g > train_gamma

    def __iter__(self) -> Iterator[float]:
        return iter(self.levels)

    def __len__(self) -> int:
        return len(self.levels)

    def __getitem__(self, index: int) -> float:
        return self.levels[index]

    def __contains__(self, gamma: object) -> bool:
        return gamma in self.levels

    def to_list(self) -> list[float]:
        """The JSON form: a list of numbers."""
        return list(self.levels)
