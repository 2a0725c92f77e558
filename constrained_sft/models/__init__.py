"""
Model classes the library defines, registered with the transformers Auto classes so that a saved model reloads with
`AutoModelForSequenceClassification.from_pretrained` (`import constrained_sft` registers them).

- `PooledLinearForSequenceClassification`: the paper's classifier readout, one linear layer on the pooled token shared by every
  layer (Section 5), on any transformers encoder.
- `UTForSequenceClassification` (`UTConfig`, `UTModel`): the paper's unrolled transformer (Yang et al., 2022) for text,
  attention tied across layers, ReLU perceptrons, average pooling into the shared linear readout.

May import: utils.
"""

from .pooled_linear import POOLINGS, PooledLinearConfig, PooledLinearForSequenceClassification
from .ut import UTConfig, UTForSequenceClassification, UTModel

READOUTS = ("head", "linear")  # `classifier_readout`: the model's own head, or the paper's shared linear layer
ARCHITECTURES = (
    "pretrained",
    "ut",
)  # `classifier_architecture`: the model at `model_name_or_path`, or a UT on its embeddings

__all__ = [
    "ARCHITECTURES",
    "POOLINGS",
    "READOUTS",
    "PooledLinearConfig",
    "PooledLinearForSequenceClassification",
    "UTConfig",
    "UTForSequenceClassification",
    "UTModel",
]
