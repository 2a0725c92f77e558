"""
Constrained fine-tuning for the Hugging Face stack: every layer must reduce the loss.

The package, bottom to top (a folder imports only from the floors below it; `tests/test_layout.py` checks it):
`version`, `utils`, `config` -> `constraints` -> `readout`, `noise`, `data`, `models` -> `trainers` -> `tasks` ->
`evaluation` -> `sweep` -> `cli`.

`import constrained_sft` loads nothing but this module (no torch, no transformers), as `import trl` does: each public
name below is imported from its module the first time it is read (PEP 562 `__getattr__`), so a user who wants only
`embedding_noise` pays for the noise module and torch, not for the training stack.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from typing import TYPE_CHECKING, Any

from .version import VERSION

__version__ = VERSION

# public name -> the module that defines it
_EXPORTS = {
    "ConstrainedConfig": "config",
    "ConstrainedSFTConfig": "config",
    "DescentConstraints": "constraints",
    "DualOptimizer": "constraints",
    "Multipliers": "constraints",
    "PrimalDual": "constraints",
    "AdamDual": "constraints",
    "SGDDual": "constraints",
    "FixedDual": "constraints",
    "EarlyExit": "constraints",
    "ConstraintStateError": "constraints",
    "PooledLinearConfig": "models",
    "PooledLinearForSequenceClassification": "models",
    "DUSTConfig": "models",
    "DUSTForDenoising": "models",
    "VideoUTConfig": "models",
    "VideoUTForDenoising": "models",
    "ViTDenoiserConfig": "models",
    "ViTForDenoising": "models",
    "EmbeddingNoiseCollator": "noise",
    "EmbeddingNoiseError": "noise",
    "embedding_noise": "noise",
    "embedding_sigma": "noise",
    "CausalLMReadout": "readout",
    "ClassifierReadout": "readout",
    "ReadoutError": "readout",
    "ReadoutLoss": "readout",
    "ConstrainedSFTTrainer": "trainers",
    "ConstrainedTrainer": "trainers",
    "CheckpointError": "trainers",
    "NonFiniteStepError": "trainers",
    "OutputDirError": "trainers",
}

__all__ = [
    "AdamDual",
    "CausalLMReadout",
    "CheckpointError",
    "ClassifierReadout",
    "ConstrainedConfig",
    "ConstrainedSFTConfig",
    "ConstrainedSFTTrainer",
    "ConstrainedTrainer",
    "ConstraintStateError",
    "DUSTConfig",
    "DUSTForDenoising",
    "DescentConstraints",
    "DualOptimizer",
    "EarlyExit",
    "EmbeddingNoiseCollator",
    "EmbeddingNoiseError",
    "FixedDual",
    "Multipliers",
    "NonFiniteStepError",
    "OutputDirError",
    "PooledLinearConfig",
    "PooledLinearForSequenceClassification",
    "PrimalDual",
    "ReadoutError",
    "ReadoutLoss",
    "SGDDual",
    "ViTDenoiserConfig",
    "ViTForDenoising",
    "VideoUTConfig",
    "VideoUTForDenoising",
    "embedding_noise",
    "embedding_sigma",
]  # the names of `_EXPORTS` (tests/cli/test_imports.py checks)


# modules that moved (old path -> where its names are now): importing an old path fails with one line naming the new
MOVED = {
    "constrained_sft.constraints.state_io": "constrained_sft.trainers.resume.files (the checkpoint's constraint-state "
    "files; ConstraintStateError: constrained_sft.constraints)",
    "constrained_sft.trainers.mixin": "constrained_sft.trainers.constrained (ConstrainedTrainerMixin, BatchScore); "
    "the trainer's noise: constrained_sft.trainers.noise",
    "constrained_sft.trainers.classifier": "constrained_sft.trainers.readout (ConstrainedTrainer; also "
    "`from constrained_sft import ConstrainedTrainer`)",
    "constrained_sft.trainers.checkpoints": "constrained_sft.trainers.resume.select (which checkpoint) and "
    "constrained_sft.trainers.resume.files (the marker)",
    "constrained_sft.trainers.checkpointing": "constrained_sft.trainers.resume.overrides",
    "constrained_sft.trainers.output_dir": "constrained_sft.trainers.resume.run_folder",
    "constrained_sft.trainers.nonfinite": "constrained_sft.trainers.callbacks (NonFiniteStepError: also "
    "`from constrained_sft import NonFiniteStepError`)",
}


class _MovedModules(importlib.abc.MetaPathFinder):
    """Consulted last, so only for a module no file provides: an old path of `MOVED` fails naming the new one."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            raise ModuleNotFoundError(f"{fullname} has moved: import from {MOVED[fullname]}.", name=fullname)
        return None


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # read once: later reads are plain attribute lookups
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from .config import ConstrainedConfig, ConstrainedSFTConfig
    from .constraints import (
        AdamDual,
        ConstraintStateError,
        DescentConstraints,
        DualOptimizer,
        EarlyExit,
        FixedDual,
        Multipliers,
        PrimalDual,
        SGDDual,
    )
    from .models import (
        DUSTConfig,
        DUSTForDenoising,
        PooledLinearConfig,
        PooledLinearForSequenceClassification,
        VideoUTConfig,
        VideoUTForDenoising,
        ViTDenoiserConfig,
        ViTForDenoising,
    )
    from .noise import EmbeddingNoiseCollator, EmbeddingNoiseError, embedding_noise, embedding_sigma
    from .readout import CausalLMReadout, ClassifierReadout, ReadoutError, ReadoutLoss
    from .trainers import (
        CheckpointError,
        ConstrainedSFTTrainer,
        ConstrainedTrainer,
        NonFiniteStepError,
        OutputDirError,
    )
