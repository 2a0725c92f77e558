"""A collator wrapper that gives every example its own embedding-noise level `noise_gamma`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .embedding import EmbeddingNoiseError


class EmbeddingNoiseCollator:
    """
    Wraps any collator (TRL's, transformers', a function) and adds `noise_gamma`, a float32 tensor with one level per
    example, drawn as:

    - `gamma=1.5`: every example at 1.5;
    - `gamma_range=(0.5, 2.0)`: uniform in the range;
    - `gamma_levels=[0.5, 1.0, 1.5]`: one of the levels, uniformly;

    and, with probability `clean_prob`, 0 (left clean). The trainers pop `noise_gamma` before the model's forward and
    perturb each example's token embeddings at its own level.
    """

    def __init__(
        self,
        base: Callable[[list[dict[str, Any]]], dict[str, Any]],
        gamma: float | None = None,
        gamma_range: Sequence[float] | None = None,
        gamma_levels: Sequence[float] | None = None,
        clean_prob: float = 0.0,
        seed: int = 0,
    ) -> None:
        given = [
            name
            for name, v in (("gamma", gamma), ("gamma_range", gamma_range), ("gamma_levels", gamma_levels))
            if v is not None
        ]
        if len(given) != 1:
            raise EmbeddingNoiseError(
                f"Give exactly one of `gamma`, `gamma_range`, `gamma_levels`; got {given or 'none'}."
            )
        if gamma is not None:
            _nonnegative("gamma", [gamma])
        if gamma_range is not None:
            if len(gamma_range) != 2:
                raise EmbeddingNoiseError(f"`gamma_range` must be [gamma_min, gamma_max], got {list(gamma_range)!r}.")
            _nonnegative("gamma_range", gamma_range)
            if gamma_range[0] > gamma_range[1]:
                raise EmbeddingNoiseError(f"`gamma_range` needs gamma_min <= gamma_max, got {list(gamma_range)!r}.")
        if gamma_levels is not None:
            if len(gamma_levels) == 0:
                raise EmbeddingNoiseError("`gamma_levels` must list at least one level.")
            _nonnegative("gamma_levels", gamma_levels)
        if not (isinstance(clean_prob, (int, float)) and 0.0 <= clean_prob <= 1.0):
            raise EmbeddingNoiseError(f"`clean_prob` must be a probability in [0, 1], got {clean_prob!r}.")
        self.base = base
        self.gamma, self.gamma_range, self.gamma_levels = gamma, gamma_range, gamma_levels
        self.clean_prob = float(clean_prob)
        self.seed = seed
        self._generator: torch.Generator | None = None

    def _rng(self) -> torch.Generator:
        if self._generator is None:  # created lazily, so each dataloader worker gets its own stream
            info = torch.utils.data.get_worker_info()
            self._generator = torch.Generator().manual_seed(self.seed + (info.id + 1 if info else 0) * 1_000_003)
        return self._generator

    def sample(self, n: int) -> torch.Tensor:
        g = self._rng()
        if self.gamma is not None:
            levels = torch.full((n,), float(self.gamma))
        elif self.gamma_range is not None:
            low, high = map(float, self.gamma_range)
            levels = low + (high - low) * torch.rand(n, generator=g)
        else:
            choices = torch.tensor([float(v) for v in self.gamma_levels])
            levels = choices[torch.randint(len(choices), (n,), generator=g)]
        if self.clean_prob > 0:
            levels = torch.where(torch.rand(n, generator=g) < self.clean_prob, torch.zeros(n), levels)
        return levels.float()

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.base(examples)
        batch["noise_gamma"] = self.sample(len(examples))
        return batch


def _nonnegative(name: str, values: Sequence[float]) -> None:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise EmbeddingNoiseError(f"`{name}` values must be finite numbers >= 0, got {list(values)!r}.")
