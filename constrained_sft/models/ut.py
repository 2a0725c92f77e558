"""
The unrolled transformer (UT) of Yang et al. (2022) as the paper trains it for text classification (Section 5,
Appendix B.3, C.2): a stack of L layers, each

    Z_l   = V X_{l-1} softmax[(Q X_{l-1})^T (K X_{l-1})]          (paper eq. 1; C.2 eq. 47)
    X_l   = Phi_l = ReLU(W_l Z_l + U_l X_{l-1})                     (paper eq. 2; C.2 eq. 48)

with the attention parameters Q, K, V tied across layers (one set for the whole stack, as in UT and DUST) and W_l,
U_l per layer; X_0 are the word embeddings; psi(X_l) = C mean_t(X_l) + c, the shared linear readout on average-pooled
tokens (Section 5: "the average pooling of the output vectors ... for unrolled transformer"). Xavier initialisation
(B.3); the word embeddings can start from a pretrained encoder's table (`from_pretrained_embeddings`; the paper uses
DistilBERT's, offline this library uses MiniLM's).

Readings where the paper leaves a choice (each a config field where it could matter):
- the equations act on columns (X is D x T); here X is `[B, T, D]` and token t attends over tokens s with weights
  softmax_s(q_t . k_s): the paper's form with the names Q and K swapped, the same family of layers;
- scores are scaled by 1/sqrt(D) (`attention_scale`), a fixed reparametrisation of Q that keeps Xavier-initialised
  scores at unit scale for D = 384 or 768; the equation has no scale;
- no biases in Q, K, V, W_l, U_l (the equations have none); the readout has one;
- a single attention head, and no position embeddings by default (`position_embeddings`): B.3 says UT takes "the
  same word embeddings as DistilBERT", nothing about positions; padding tokens are masked out of the attention and
  of the pooling.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, SequenceClassifierOutput

from ..utils.types import Kwargs
from .configs import UTConfig, label_count


class UTSizes(Protocol):
    """What the shared attention and a layer read of a config (the text UT's and the video UT's)."""

    @property
    def hidden_size(self) -> int: ...

    @property
    def attention_scale(self) -> bool: ...


class UTAttention(nn.Module):
    """Z = V X softmax[(Q X)^T (K X)] (eq. 1), one instance shared by every layer: `[B, T, D]` -> `[B, T, D]`."""

    def __init__(self, config: UTSizes) -> None:
        super().__init__()
        d = config.hidden_size
        self.q, self.k, self.v = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.scale = 1 / math.sqrt(d) if config.attention_scale else 1.0

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        scores = self.q(x) @ self.k(x).transpose(1, 2) * self.scale  # [B, T, T]: token t (row) over tokens s
        if attention_mask is not None:
            scores = scores.masked_fill(~attention_mask.bool()[:, None, :], torch.finfo(scores.dtype).min)
        return scores.softmax(-1) @ self.v(x)  # [B, T, D]; costs 4 T^2 D + 3 T D^2 multiply-adds per sequence


class UTLayer(nn.Module):
    """X_l = ReLU(W_l Z_l + U_l X_{l-1}) (eq. 2): the perceptron with its residual input, per layer."""

    def __init__(self, config: UTSizes) -> None:
        super().__init__()
        d = config.hidden_size
        self.w = nn.Linear(d, d, bias=False)
        self.u = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.w(z) + self.u(x))


class UTPreTrainedModel(PreTrainedModel):
    config_class = UTConfig
    base_model_prefix = "ut"

    def _init_weights(self, module: nn.Module) -> None:
        """Xavier (uniform) for every matrix (B.3), zero biases; embeddings too unless copied from an encoder."""
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.xavier_uniform_(module.weight)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()


class UTModel(UTPreTrainedModel):
    """X_0 = embeddings, then L layers sharing one attention; `hidden_states` = (X_0, X_1, ..., X_L)."""

    def __init__(self, config: UTConfig) -> None:
        super().__init__(config)
        self.embeddings: nn.Module = nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.positions = (
            nn.Embedding(config.max_position_embeddings, config.hidden_size) if config.position_embeddings else None
        )
        self.attention = UTAttention(config)  # Q, K, V tied across layers
        self.layers = nn.ModuleList(UTLayer(config) for _ in range(config.num_hidden_layers))
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embeddings = value

    def forward(
        self, input_ids=None, attention_mask=None, inputs_embeds=None, output_hidden_states=None, **kwargs
    ) -> BaseModelOutput:
        x = self.embeddings(input_ids) if inputs_embeds is None else inputs_embeds  # [B, T, D]
        if self.positions is not None:
            x = x + self.positions(torch.arange(x.shape[1], device=x.device))
        states = [x]
        for layer in self.layers:
            x = layer(x, self.attention(x, attention_mask))
            states.append(x)
        return BaseModelOutput(last_hidden_state=x, hidden_states=tuple(states) if output_hidden_states else None)


class UTForSequenceClassification(UTPreTrainedModel):
    """UT with the shared linear readout psi(X) = C mean_t(X) + c on every layer; logits = psi(X_L)."""

    def __init__(self, config: UTConfig) -> None:
        super().__init__(config)
        self.ut = UTModel(config)
        self.classifier = nn.Linear(config.hidden_size, label_count(config))  # C, c: D -> classes
        self.post_init()

    @classmethod
    def from_pretrained_embeddings(
        cls, path: str, num_labels: int, num_layers: int = 3, revision: str | None = None, **config_kwargs
    ):
        """A UT whose word embeddings are a pretrained encoder's (`path`: a folder or Hub id), everything else Xavier;
        `hidden_size` and `vocab_size` follow the encoder's table."""
        table = AutoModel.from_pretrained(path, revision=revision).get_input_embeddings().weight.detach()  # [V, D]
        encoder = AutoConfig.from_pretrained(path, revision=revision)
        labels: Kwargs = {"num_labels": num_labels}  # PreTrainedConfig's keyword (it sets id2label), no field
        config = UTConfig(
            vocab_size=table.shape[0],
            hidden_size=table.shape[1],
            num_hidden_layers=num_layers,
            pad_token_id=encoder.pad_token_id,
            architectures=[cls.__name__],
            **labels,
            **config_kwargs,
        )
        model = cls(config)
        with torch.no_grad():
            model.ut.get_parameter("embeddings.weight").copy_(table)
        return model

    def get_input_embeddings(self) -> nn.Module:
        return self.ut.embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.ut.embeddings = value

    def readout(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """psi: any layer's `[B, T, D]` -> logits `[B, C]`, on the mean of the non-padding tokens."""
        if attention_mask is None:
            return self.classifier(hidden.mean(1))
        mask = attention_mask.to(hidden.dtype).unsqueeze(-1)  # [B, T, 1]
        return self.classifier((hidden * mask).sum(1) / mask.sum(1).clamp(min=1))

    def forward(
        self, input_ids=None, attention_mask=None, inputs_embeds=None, labels=None, output_hidden_states=None, **kwargs
    ) -> SequenceClassifierOutput:
        out = self.ut(input_ids, attention_mask, inputs_embeds, output_hidden_states=output_hidden_states)
        logits = self.readout(out.last_hidden_state, attention_mask)
        loss = None if labels is None else nn.functional.cross_entropy(logits.float(), labels)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)


AutoModel.register(UTConfig, UTModel, exist_ok=True)
AutoModelForSequenceClassification.register(UTConfig, UTForSequenceClassification, exist_ok=True)
