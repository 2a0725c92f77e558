"""
How a layer becomes a prediction and a loss: the shared readouts psi (a causal LM's final norm + LM head,
`causal_lm`; a classifier's own head on the pooled token, `classifier`), the per-example losses of the readout
contract (`losses`: cross-entropy, squared error), which next-token positions are scored
(`tokens`), per-layer losses as pure functions (`layer_losses`), the probe that measures the layers inside the
model's forward (`probe`), and the CPU kernel (`linear_nll`; the CUDA dispatch is in `causal_lm`).

May import: `constrained_sft.utils` and `constrained_sft.constraints` (for `LayerLosses`, what a readout hands to
the constrained problem). Never the trainers, the noise or anything above them.
"""

from .base import ReadoutError
from .causal_lm import CausalLMReadout
from .classifier import ClassifierReadout
from .layer_losses import aggregate, layer_token_nll, layers_token_nll
from .losses import (
    PER_EXAMPLE_LOSSES,
    CrossEntropy,
    FunctionLoss,
    ReadoutLoss,
    SquaredError,
    cross_entropy,
    readout_loss,
    squared_error,
)
from .probe import LayerProbe, ProbeRequest
from .tokens import TokenSelection, select_tokens

__all__ = [
    "CausalLMReadout",
    "ClassifierReadout",
    "LayerProbe",
    "PER_EXAMPLE_LOSSES",
    "CrossEntropy",
    "FunctionLoss",
    "ReadoutLoss",
    "SquaredError",
    "ProbeRequest",
    "ReadoutError",
    "TokenSelection",
    "aggregate",
    "cross_entropy",
    "readout_loss",
    "squared_error",
    "layer_token_nll",
    "layers_token_nll",
    "select_tokens",
]
