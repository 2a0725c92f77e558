"""
Model classes the library defines, registered with the transformers Auto classes so that a saved model reloads with
`AutoModelForSequenceClassification.from_pretrained` (`import constrained_sft` registers them).

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

from .denoisers import DENOISERS, Denoiser, denoiser_of
from .denoising import PixelInput, dct_dictionary
from .dust import DUSTConfig, DUSTForDenoising
from .pooled_linear import POOLINGS, PooledLinearConfig, PooledLinearForSequenceClassification
from .ut import UTConfig, UTForSequenceClassification, UTModel
from .video_ut import VideoUTConfig, VideoUTForDenoising
from .vit_denoiser import ViTDenoiserConfig, ViTForDenoising

READOUTS = ("head", "linear")  # `classifier_readout`: the model's own head, or the paper's shared linear layer
ARCHITECTURES = (
    "pretrained",
    "ut",
)  # `classifier_architecture`: the model at `model_name_or_path`, or a UT on its embeddings

__all__ = [
    "ARCHITECTURES",
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
