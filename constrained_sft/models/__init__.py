"""
Model classes the library defines, registered with the transformers Auto classes so that a saved model reloads with
`AutoModelForSequenceClassification.from_pretrained` (`import constrained_sft` registers them).

- `PooledLinearForSequenceClassification`: the paper's classifier readout, one linear layer on the pooled token shared by every
  layer (Section 5), on any transformers encoder.

May import: utils.
"""

from .pooled_linear import POOLINGS, PooledLinearConfig, PooledLinearForSequenceClassification

READOUTS = ("head", "linear")  # `classifier_readout`: the model's own head, or the paper's shared linear layer

__all__ = ["READOUTS", "POOLINGS", "PooledLinearConfig", "PooledLinearForSequenceClassification"]
