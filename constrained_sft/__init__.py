"""
Constrained fine-tuning for the Hugging Face stack: every layer must reduce the loss.

The package, bottom to top (a folder imports only from the floors below it; `tests/test_layout.py` checks it, and
that this map is its table):
`version` -> `utils`, `testing` -> `launch` -> `constraints` -> `config` -> `readout`, `noise`, `data`, `models` -> `trainers` ->
`tasks` -> `comparison` -> `evaluation` -> `sweep`, `study` -> `cli`.

`import constrained_sft` loads nothing but this module (no torch, no transformers), as `import trl` does: each public
name below is imported from its module the first time it is read (PEP 562 `__getattr__`), so a user who wants only
`embedding_noise` pays for the noise module and torch, not for the training stack. It still registers the library's
model classes with transformers' Auto classes, at the moment transformers loads its AutoConfig module (or at once
where it already has): a saved classifier or denoiser reloads with `AutoModel*.from_pretrained`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
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


# transformers' Auto modules -> the module of configurations registered the moment it has loaded (torch with it)
AUTO_REGISTRATIONS = {
    "transformers.models.auto.configuration_auto": ".models.configs",
    "transformers.models.auto.modeling_auto": ".models.vit_config",
}


def _register(auto_module: str) -> None:
    """Import the configurations `auto_module` allows, which registers them with `AutoConfig` (their first instance
    registers the model classes with `AutoModel*`: `models.configs`). A failure warns: it must never break
    transformers' own import."""
    try:
        importlib.import_module(AUTO_REGISTRATIONS[auto_module], __name__)
    except Exception as error:  # noqa: BLE001
        import warnings

        warnings.warn(
            f"constrained_sft could not register its model classes with the Auto classes: {error!r}", stacklevel=2
        )


class _RegisterThen(importlib.abc.Loader):
    """transformers' loader of an Auto module, then the registration (every other attribute: the loader's)."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        _register(module.__name__)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _AutoClassesHook(importlib.abc.MetaPathFinder):
    """
    `import constrained_sft` loads no transformers, yet promises the Auto-class registration: this finder, consulted
    first, hands the import of transformers' Auto modules to the finders after it and wraps their loader, so the
    registration runs the moment each module has loaded. That may be deep inside transformers importing its own
    modeling code, so what is registered then imports configuration code only (`models.configs`).
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in AUTO_REGISTRATIONS:
            return None
        sys.meta_path.remove(self)  # the other finders find the module
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            if any(name not in sys.modules for name in AUTO_REGISTRATIONS if name != fullname):
                sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisterThen(spec.loader)
        return spec


for _auto in AUTO_REGISTRATIONS:  # the Auto classes already in use: register now
    if _auto in sys.modules:
        _register(_auto)
if not all(name in sys.modules for name in AUTO_REGISTRATIONS) and not any(
    isinstance(finder, _AutoClassesHook) for finder in sys.meta_path
):
    sys.meta_path.insert(0, _AutoClassesHook())


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
