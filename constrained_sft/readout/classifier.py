"""The shared readout psi of a sequence classifier: the model's own head applied to any layer's hidden states."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ..utils.modules import unwrap_model
from .base import ReadoutError


@dataclass
class ClassifierReadout:
    """
    psi(h) = the path the model takes from its last hidden states `[B, T, D]` to its logits `[B, C]`, so that
    psi(h_L) is exactly the model's output: BERT / MiniLM: pooler (dense + tanh on [CLS]) -> dropout -> classifier;
    DistilBERT: [CLS] -> pre_classifier -> ReLU -> dropout -> classifier; RoBERTa / XLM-R / ELECTRA: their
    classification head on <s>; a model with its own `readout(hidden, attention_mask)` method (the paper's shared
    linear readout, `PooledLinearForSequenceClassification`): that method. For another architecture pass
    `readout=ClassifierReadout(head=fn, name=...)`; `takes_mask=True` when fn also takes the attention mask `[B, T]`.
    """

    head: Callable[..., torch.Tensor]
    name: str = "custom"
    takes_mask: bool = False

    def __call__(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.head(hidden, attention_mask) if self.takes_mask else self.head(hidden)

    @classmethod
    def from_model(cls, model: nn.Module) -> ClassifierReadout:
        base = unwrap_model(model)
        name = type(base).__name__
        classifier = getattr(base, "classifier", None)
        dropout = getattr(base, "dropout", None)
        if callable(readout := getattr(base, "readout", None)):
            return cls(readout, f"shared readout of {name}", takes_mask=True)
        if isinstance(pre := getattr(base, "pre_classifier", None), nn.Module) and isinstance(classifier, nn.Module):

            def distilbert(h: torch.Tensor) -> torch.Tensor:
                pooled = torch.relu(pre(h[:, 0]))
                logits: torch.Tensor = classifier(dropout(pooled) if dropout is not None else pooled)
                return logits

            return cls(distilbert, "[CLS] -> pre_classifier -> ReLU -> dropout -> classifier")
        if isinstance(classifier, nn.Module) and hasattr(classifier, "out_proj"):
            return cls(classifier, "classification head on the first token")
        pooler = getattr(getattr(base, "base_model", None), "pooler", None) or getattr(base, "pooler", None)
        if isinstance(classifier, nn.Module) and isinstance(pooler, nn.Module):

            def pooled_head(h: torch.Tensor) -> torch.Tensor:
                pooled = pooler(h)
                logits: torch.Tensor = classifier(dropout(pooled) if dropout is not None else pooled)
                return logits

            return cls(pooled_head, "pooler -> dropout -> classifier")
        raise ReadoutError(
            f"Could not find the classification head of {name}: expected a `classifier` with a `pooler`, a "
            "`pre_classifier` (DistilBERT) or an `out_proj` head (RoBERTa). Pass `readout=ClassifierReadout(head=fn)` "
            "with fn mapping hidden states [B, T, D] to logits [B, C] exactly as the model does for its last layer."
        )
