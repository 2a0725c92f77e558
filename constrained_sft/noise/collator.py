"""How each example's embedding-noise level is drawn, and a collator wrapper that attaches it as `noise_gamma`."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..utils.types import Batch, JSONRead
from .embedding import EmbeddingNoiseError


@dataclass(frozen=True)
class NoiseLevels:
    """
    How an example's embedding-noise level is drawn: `gamma` (every example at it), `gamma_range` (uniform in
    [gamma_min, gamma_max]) or `gamma_levels` (one of them, uniformly), and with probability `clean_prob` 0 (left
    clean). Exactly one of the three is given; the errors name the field.
    """

    gamma: float | None = None
    gamma_range: Sequence[float] | None = None
    gamma_levels: Sequence[float] | None = None
    clean_prob: float = 0.0

    def __post_init__(self) -> None:
        given = [
            name
            for name, v in (
                ("gamma", self.gamma),
                ("gamma_range", self.gamma_range),
                ("gamma_levels", self.gamma_levels),
            )
            if v is not None
        ]
        if len(given) != 1:
            raise EmbeddingNoiseError(
                f"Give exactly one of `gamma`, `gamma_range`, `gamma_levels`; got {given or 'none'}."
            )
        if self.gamma is not None:
            _nonnegative("gamma", [self.gamma])
        if self.gamma_range is not None:
            if len(self.gamma_range) != 2:
                raise EmbeddingNoiseError(
                    f"`gamma_range` must be [gamma_min, gamma_max], got {list(self.gamma_range)!r}."
                )
            _nonnegative("gamma_range", self.gamma_range)
            if self.gamma_range[0] > self.gamma_range[1]:
                raise EmbeddingNoiseError(
                    f"`gamma_range` needs gamma_min <= gamma_max, got {list(self.gamma_range)!r}."
                )
        if self.gamma_levels is not None:
            if len(self.gamma_levels) == 0:
                raise EmbeddingNoiseError("`gamma_levels` must list at least one level.")
            _nonnegative("gamma_levels", self.gamma_levels)
        if not (isinstance(self.clean_prob, (int, float)) and 0.0 <= self.clean_prob <= 1.0):
            raise EmbeddingNoiseError(f"`clean_prob` must be a probability in [0, 1], got {self.clean_prob!r}.")

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """`[n]` float32 levels, drawn from `generator` only."""
        if self.gamma is not None:
            levels = torch.full((n,), float(self.gamma))
        elif self.gamma_range is not None:
            low, high = map(float, self.gamma_range)
            levels = low + (high - low) * torch.rand(n, generator=generator)
        else:  # gamma_levels: __post_init__ left exactly one of the three given (frozen, so it stays)
            choices = torch.tensor([float(v) for v in self.gamma_levels or ()])
            levels = choices[torch.randint(len(choices), (n,), generator=generator)]
        if self.clean_prob > 0:
            levels = torch.where(torch.rand(n, generator=generator) < self.clean_prob, torch.zeros(n), levels)
        return levels.float()


class EmbeddingNoiseCollator:
    """
    Wraps any collator (TRL's, transformers', a function) and adds `noise_gamma`, a float32 tensor with one level per
    example, drawn as [`NoiseLevels`] says (`gamma=`, `gamma_range=` or `gamma_levels=`, and `clean_prob`). The
    trainers pop `noise_gamma` before the model's forward and perturb each example's token embeddings at its own
    level.

    Each (seed, rank, dataloader worker) draws from its own stream. The stream is not part of a checkpoint: a resumed
    run draws other levels than the uninterrupted one. The trainers' own training noise (`noise_gamma` in the
    config) needs no collator and draws from (seed, step, micro-batch, rank), so it resumes exactly.
    """

    def __init__(
        self,
        base: Callable[[list[JSONRead]], Batch],
        gamma: float | None = None,
        gamma_range: Sequence[float] | None = None,
        gamma_levels: Sequence[float] | None = None,
        clean_prob: float = 0.0,
        seed: int = 0,
        rank: int = 0,
    ) -> None:
        self.base = base
        self.levels = NoiseLevels(gamma, gamma_range, gamma_levels, clean_prob)
        self.seed, self.rank = seed, rank
        self._generator: torch.Generator | None = None

    def _rng(self) -> torch.Generator:
        if self._generator is None:  # created lazily, so each dataloader worker gets its own stream
            info = torch.utils.data.get_worker_info()
            key = f"noise-collator/{self.seed}/{self.rank}/{info.id if info else -1}"
            self._generator = torch.Generator().manual_seed(zlib.crc32(key.encode()))
        return self._generator

    def sample(self, n: int) -> torch.Tensor:
        return self.levels.sample(n, self._rng())

    def __call__(self, examples: list[JSONRead]) -> Batch:
        batch = self.base(examples)
        batch["noise_gamma"] = self.sample(len(examples))
        return batch


def _nonnegative(name: str, values: Sequence[float]) -> None:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise EmbeddingNoiseError(f"`{name}` values must be finite numbers >= 0, got {list(values)!r}.")
