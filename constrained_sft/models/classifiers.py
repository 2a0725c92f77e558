"""
The sequence classifiers a `task: classification` recipe can train, by name, like the denoisers' registry: the
readouts (`classifier_readout`: the model's own head, the paper's shared linear layer) and the architectures
(`classifier_architecture`: the model at `model_name_or_path`, or the paper's unrolled transformer on its word
embeddings). Each entry says how it builds a new model and which saved model already is one (it reloads as it is),
and what it needs of the recipe's other fields. A new readout or architecture is one entry here; nothing above
branches on the names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .configs import PooledLinearConfig, UTConfig


@dataclass(frozen=True)
class ClassifierKind:
    """
    One readout or architecture. `build(path, labels, recipe, kwargs)`: a new model from the encoder at `path` with
    the dataset's `labels` (num_labels, id2label, label2id), reading the recipe's fields (duck-typed), `kwargs` for
    `from_pretrained`; None: the model at the path as it is (its own head, or a new head with the labels). `saved`:
    the config class of a saved model that already is one (built once, it reloads as it is). `problem(recipe)`: what
    the recipe's other fields must be for it (None: nothing).
    """

    name: str
    description: str
    build: Callable[[str, dict, Any, dict], Any] | None = None
    saved: type | None = None
    problem: Callable[[Any], str | None] = lambda recipe: None

    def builds(self, config) -> bool:
        """Whether a model of this kind is built anew from a model with `config` (not already one; a kind that names no
        `saved` config class cannot tell, and builds)."""
        return self.build is not None and (self.saved is None or not isinstance(config, self.saved))


def _linear(path: str, labels: dict, recipe: Any, kwargs: dict):
    from .pooled_linear import PooledLinearForSequenceClassification

    return PooledLinearForSequenceClassification.from_encoder(
        path, pooling=recipe.classifier_pooling, **labels, **kwargs
    )


def _ut(path: str, labels: dict, recipe: Any, kwargs: dict):
    import torch

    from .ut import UTForSequenceClassification

    model = UTForSequenceClassification.from_pretrained_embeddings(
        path, num_layers=recipe.ut_layers, revision=kwargs.get("revision"), **labels
    )
    dtype = kwargs.get("dtype")
    return model.to(dtype) if isinstance(dtype, torch.dtype) else model


def _ut_problem(recipe: Any) -> str | None:
    if (recipe.classifier_readout, recipe.classifier_pooling) != ("linear", "mean"):
        return (
            "`classifier_architecture: ut` reads every layer out by its shared linear layer on the mean of the tokens: "
            "set `classifier_readout: linear` and `classifier_pooling: mean` (got "
            f"{recipe.classifier_readout!r}, {recipe.classifier_pooling!r})."
        )
    return None


# A fixed table, read-only (`MappingProxyType`): its entries are records (values), not classes a plug-in registers, so
# `utils.registry.Registry`, which checks classes, is not theirs; another one is another row here.
# `classifier_readout`: the shared readout psi of every layer
READOUTS: Mapping[str, ClassifierKind] = MappingProxyType(
    {
        kind.name: kind
        for kind in (
            ClassifierKind(
                "head", "the model's own pooler / classification head (a new one with the dataset's classes)"
            ),
            ClassifierKind(
                "linear",
                "the paper's: one linear layer on the pooled token, saved with the model",
                _linear,
                PooledLinearConfig,
            ),
        )
    }
)

# `classifier_architecture`: what is read out (a fixed table, as READOUTS)
ARCHITECTURES: Mapping[str, ClassifierKind] = MappingProxyType(
    {
        kind.name: kind
        for kind in (
            ClassifierKind("pretrained", "the model at `model_name_or_path`"),
            ClassifierKind(
                "ut",
                "the paper's unrolled transformer, trained from scratch on that encoder's word embeddings",
                _ut,
                UTConfig,
                _ut_problem,
            ),
        )
    }
)
