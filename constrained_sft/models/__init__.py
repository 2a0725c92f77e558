"""
Model classes the library defines, registered with the transformers Auto classes so that a saved model reloads with
`AutoModelForSequenceClassification.from_pretrained` / `AutoModel.from_pretrained` after a bare `import
constrained_sft` (the configurations register when transformers' AutoConfig loads, the model classes when the first
configuration is built: `configs`; `tests/models/test_auto_classes.py` reloads each in a fresh interpreter).

- `PooledLinearForSequenceClassification`: the paper's classifier readout, one linear layer on the pooled token shared by every
  layer (Section 5), on any transformers encoder.
- `UTForSequenceClassification` (`UTConfig`, `UTModel`): the paper's unrolled transformer (Yang et al., 2022) for text,
  attention tied across layers, ReLU perceptrons, average pooling into the shared linear readout.
- Video denoisers (Section 4), registered with `AutoModel`: `DUSTForDenoising` (De Weerdt et al., 2023: symmetric
  attention + LISTA on DCT dictionaries), `VideoUTForDenoising` (the UT on patch sequences) and `ViTForDenoising`
  (a `ViTModel` with a shared linear un-patching readout); their shared pieces are in `denoising`, and the registry
  of their names (`denoisers.DENOISERS`: class, sequence axis, recipe fields, how each is built) in `denoisers`.

May import: utils.
"""

import importlib
from typing import TYPE_CHECKING, Any

# public name -> the module that defines it: imported when first read (PEP 562), so that `configs` (what the package
# registers when transformers' AutoConfig loads) can be imported without the modeling code
_EXPORTS = {
    "ARCHITECTURES": "classifiers",
    "READOUTS": "classifiers",
    "ClassifierKind": "classifiers",
    "DENOISERS": "denoisers",
    "Denoiser": "denoisers",
    "denoiser_of": "denoisers",
    "PixelInput": "denoising",
    "dct_dictionary": "denoising",
    "DUSTForDenoising": "dust",
    "PooledLinearForSequenceClassification": "pooled_linear",
    "UTForSequenceClassification": "ut",
    "UTModel": "ut",
    "VideoUTForDenoising": "video_ut",
    "ViTForDenoising": "vit_denoiser",
    "POOLINGS": "configs",
    "DUSTConfig": "configs",
    "PooledLinearConfig": "configs",
    "UTConfig": "configs",
    "VideoUTConfig": "configs",
    "ViTDenoiserConfig": "vit_config",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:
    from .classifiers import ARCHITECTURES, READOUTS, ClassifierKind
    from .configs import POOLINGS, DUSTConfig, PooledLinearConfig, UTConfig, VideoUTConfig
    from .denoisers import DENOISERS, Denoiser, denoiser_of
    from .denoising import PixelInput, dct_dictionary
    from .dust import DUSTForDenoising
    from .pooled_linear import PooledLinearForSequenceClassification
    from .ut import UTForSequenceClassification, UTModel
    from .video_ut import VideoUTForDenoising
    from .vit_config import ViTDenoiserConfig
    from .vit_denoiser import ViTForDenoising

__all__ = [
    "ARCHITECTURES",
    "ClassifierKind",
    "DENOISERS",
    "Denoiser",
    "DUSTConfig",
    "DUSTForDenoising",
    "PixelInput",
    "VideoUTConfig",
    "VideoUTForDenoising",
    "ViTDenoiserConfig",
    "ViTForDenoising",
    "dct_dictionary",
    "denoiser_of",
    "POOLINGS",
    "READOUTS",
    "PooledLinearConfig",
    "PooledLinearForSequenceClassification",
    "UTConfig",
    "UTForSequenceClassification",
    "UTModel",
]
