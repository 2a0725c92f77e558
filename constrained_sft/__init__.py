"""
Constrained fine-tuning for the Hugging Face stack: every layer must reduce the loss.

The package, bottom to top (a folder imports only from the floors below it; `tests/test_layout.py` checks it):
`utils`, `config` -> `constraints` -> `readout`, `noise`, `data`, `models` -> `trainers` -> `tasks` -> `evaluation`
-> `sweep` -> `cli`.
"""

from .config import ConstrainedConfig, ConstrainedSFTConfig, ConstraintArguments, NoiseArguments
from .constraints import DescentConstraints, DualOptimizer, Multipliers, PrimalDual
from .models import PooledLinearConfig, PooledLinearForSequenceClassification
from .noise import EmbeddingNoiseCollator, EmbeddingNoiseError, embedding_noise, embedding_sigma
from .readout import CausalLMReadout, ClassifierReadout, ReadoutError
from .trainers import ConstrainedSFTTrainer, ConstrainedTrainer
from .utils import VERSION as __version__  # noqa: F401 - the package version, for `constrained_sft.__version__`

__all__ = [
    "PooledLinearConfig",
    "PooledLinearForSequenceClassification",
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
