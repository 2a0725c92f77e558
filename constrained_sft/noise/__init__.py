"""
Gaussian noise on token embeddings, e ~ N(mu, (gamma sigma_x)^2 I), in training, evaluation and generation: the
forward hook and sigma_x (`embedding`), and the collator that gives each training example its own level
(`collator`).

May import: `constrained_sft.utils` only. Trainers and evaluation use it; it knows nothing of them.
"""

from .collator import EmbeddingNoiseCollator, NoiseLevels
from .embedding import (
    EmbeddingNoiseError,
    embedding_noise,
    embedding_sigma,
    input_embedding_module,
    noise_stream,
    noisy,
    parse_levels,
)

__all__ = [
    "EmbeddingNoiseCollator",
    "EmbeddingNoiseError",
    "NoiseLevels",
    "embedding_noise",
    "embedding_sigma",
    "input_embedding_module",
    "noise_stream",
    "noisy",
    "parse_levels",
]
