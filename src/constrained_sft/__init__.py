"""Constrained fine-tuning for the Hugging Face stack: every layer must reduce the loss."""

from .classifier_readout import ClassifierReadout
from .classifier_trainer import ConstrainedConfig, ConstrainedTrainer
from .config import ConstrainedSFTConfig, ConstraintArguments, NoiseArguments
from .dual_optimizer import DualOptimizer
from .lagrangian import DescentConstraints
from .multipliers import Multipliers
from .noise import EmbeddingNoiseError, embedding_noise, embedding_sigma
from .noise_collator import EmbeddingNoiseCollator
from .primal_dual import PrimalDual
from .readout import CausalLMReadout, ReadoutError
from .sft_trainer import ConstrainedSFTTrainer

__version__ = "0.1.0"

__all__ = [
    "CausalLMReadout",
    "ClassifierReadout",
    "ConstrainedConfig",
    "ConstrainedTrainer",
    "ConstrainedSFTConfig",
    "ConstrainedSFTTrainer",
    "ConstraintArguments",
    "DescentConstraints",
    "DualOptimizer",
    "EmbeddingNoiseCollator",
    "EmbeddingNoiseError",
    "Multipliers",
    "NoiseArguments",
    "PrimalDual",
    "ReadoutError",
    "embedding_noise",
    "embedding_sigma",
]
