"""
The Trainer side. How constrained training works (`constrained`: the penalty in the loss, the dual step, the logs,
the feasibility report), the trainer's noise (`noise`), its callbacks (`callbacks`: dual step, non-finite guard,
compact console), resume (`resume/`: checkpoint files, which checkpoint, the run folder, and every private `Trainer`
override), and the two thin trainers built on it: `ConstrainedSFTTrainer` (TRL's `SFTTrainer`, causal LMs; `sft`)
and `ConstrainedTrainer` (`transformers.Trainer`, any model with a readout: classifiers and denoisers; `readout`).

May import: `constrained_sft.config`, `utils`, `constraints`, `readout`, `noise`. Never `data`, `evaluation` or
`cli`.
"""

from .callbacks import NonFiniteStepError
from .constrained import BatchScore, ConstrainedTrainerMixin
from .readout import ConstrainedTrainer
from .resume import CheckpointError, ConstraintStateError, OutputDirError, check_output_dir
from .sft import ConstrainedSFTTrainer, auto_tokens_per_sequence

__all__ = [
    "BatchScore",
    "CheckpointError",
    "ConstrainedSFTTrainer",
    "ConstrainedTrainer",
    "ConstrainedTrainerMixin",
    "ConstraintStateError",
    "NonFiniteStepError",
    "OutputDirError",
    "auto_tokens_per_sequence",
    "check_output_dir",
]
