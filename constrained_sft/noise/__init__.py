"""
Gaussian noise on token embeddings, e ~ N(mu, (gamma sigma_x)^2 I), in training, evaluation and generation: the
forward hook and sigma_x (`embedding`), a VLM's text and image positions (`modality`), the one entry point to both
(`entry.noisy`), the same noise drawn ahead for a `generate()` call (`decoding`), the collator that gives each
training example its own level (`collator`), and the noise levels of an evaluation as one type (`grid.NoiseGrid`).

May import: `constrained_sft.utils` only. Trainers and evaluation use it; it knows nothing of them.
"""

from .collator import EmbeddingNoiseCollator, NoiseLevels
from .decoding import DecodingNoise, noisy_decoding
from .embedding import EmbeddingNoiseError, embedding_sigma, input_embedding_module, noise_stream
from .entry import embedding_noise, noisy
from .grid import NoiseGrid

__all__ = [
    "DecodingNoise",
    "EmbeddingNoiseCollator",
    "EmbeddingNoiseError",
    "NoiseGrid",
    "NoiseLevels",
    "embedding_noise",
    "embedding_sigma",
    "input_embedding_module",
    "noise_stream",
    "noisy",
    "noisy_decoding",
]
