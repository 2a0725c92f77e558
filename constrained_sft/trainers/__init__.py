"""
The Trainer side: what every constrained trainer shares (`mixin`: the Lagrangian term in the loss, the dual step
after each optimizer step, noise in training and evaluation, metrics, checkpoints, the feasibility report), and the
two thin trainers built on it: `ConstrainedSFTTrainer` (TRL's `SFTTrainer`, causal LMs; `sft`) and
`ConstrainedTrainer` (`transformers.Trainer`, sequence classifiers; `classifier`).

May import: `constrained_sft.config`, `utils`, `constraints`, `readout`, `noise`. Never `data`, `evaluation` or
`cli`.
"""

from .checkpoints import CheckpointError
from .classifier import ConstrainedTrainer
from .mixin import BatchScore, ConstrainedTrainerMixin
from .nonfinite import NonFiniteStepError
from .output_dir import OutputDirError, check_output_dir
from .sft import ConstrainedSFTTrainer, auto_tokens_per_sequence

__all__ = [
    "BatchScore",
    "CheckpointError",
    "ConstrainedSFTTrainer",
    "ConstrainedTrainer",
    "ConstrainedTrainerMixin",
    "NonFiniteStepError",
    "OutputDirError",
    "auto_tokens_per_sequence",
    "check_output_dir",
]
