"""
The paper's classifier readout as a model: an encoder whose every layer l is read out by the same
psi(h) = W pool(h) + b, "a single linear layer followed by a softmax" (Section 5). The model's own logits are psi of
its last layer, so f_L is exactly the model's loss, and `readout(hidden_states, attention_mask)` reads any other
layer the same way.

Pooling: 'cls' takes the first token ([CLS] of BERT-likes, <s> of RoBERTa); 'mean' averages the non-padding tokens
(the paper's average pooling for its unrolled transformer, Appendix B.3). No pooler, no dropout, no non-linearity
between the encoder and W: a pretrained encoder's pooler / head is not used.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModel, AutoModelForSequenceClassification, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput

from ..utils.types import Kwargs
from .configs import PooledLinearConfig, Pooling, label_count


class PooledLinearForSequenceClassification(PreTrainedModel):
    config_class = PooledLinearConfig
    base_model_prefix = "encoder"
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    def __init__(self, config: PooledLinearConfig, encoder: PreTrainedModel | None = None):
        super().__init__(config)
        built = encoder if encoder is not None else AutoModel.from_config(config.encoder_config())
        self.encoder = _without_pooler(built)
        self.classifier = nn.Linear(config.hidden_size, label_count(config))  # W, b: D -> C
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear) and module is getattr(self, "classifier", None):
            nn.init.xavier_uniform_(module.weight)
            nn.init.zeros_(module.bias)

    @classmethod
    def from_encoder(
        cls, path: str, num_labels: int, pooling: Pooling = "cls", id2label=None, label2id=None, **kwargs
    ) -> PooledLinearForSequenceClassification:
        """A pretrained encoder (a folder or Hub id; any pretrained head is dropped) with a new readout W, in the
        encoder's dtype."""
        encoder = _without_pooler(AutoModel.from_pretrained(path, **kwargs))
        labels: Kwargs = {"num_labels": num_labels}  # PreTrainedConfig's keyword (it sets id2label), no field
        config = PooledLinearConfig(
            encoder=encoder.config.to_dict(),
            pooling=pooling,
            id2label=id2label,
            label2id=label2id,
            architectures=[cls.__name__],
            **labels,
        )
        model = cls(config, encoder)  # the pretrained encoder, no random one
        model.classifier.to(next(encoder.parameters()).dtype)
        return model

    def get_input_embeddings(self) -> nn.Module:
        return self.encoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.encoder.set_input_embeddings(value)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """`[B, T, D]` -> `[B, D]`."""
        if self.config.pooling == "cls":
            return hidden[:, 0]
        if attention_mask is None:
            return hidden.mean(1)
        mask = attention_mask.to(hidden.dtype).unsqueeze(-1)  # [B, T, 1]
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)

    def readout(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """psi: hidden states of any layer `[B, T, D]` -> logits `[B, C]`."""
        return self.classifier(self.pool(hidden, attention_mask))

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels=None,
        output_hidden_states=None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        encoder_kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        out = self.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_hidden_states=output_hidden_states,
            **encoder_kwargs,
        )
        logits = self.readout(out.last_hidden_state, attention_mask)
        loss = None if labels is None else nn.functional.cross_entropy(logits.float(), labels)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)


def _without_pooler(encoder: PreTrainedModel) -> PreTrainedModel:
    """BERT-likes build a pooler (dense + tanh on [CLS]) that the readout replaces; their forward skips a None one,
    and an unused module would hold parameters that DDP reports as unused."""
    if isinstance(getattr(encoder, "pooler", None), nn.Module):
        encoder.add_module("pooler", None)
    return encoder


AutoModelForSequenceClassification.register(PooledLinearConfig, PooledLinearForSequenceClassification, exist_ok=True)
