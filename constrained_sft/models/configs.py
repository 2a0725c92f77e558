"""
The configurations of the library's model classes, and their registration with transformers' Auto classes.

This module imports transformers' configuration base only (no modeling code): the package imports it the moment
transformers' `AutoConfig` module has loaded (`constrained_sft/__init__.py`), which may happen in the middle of
transformers importing its own modeling code. `ViTDenoiserConfig` extends `ViTConfig`, whose module needs the
modeling Auto module complete: it is `vit_config`, imported once that has loaded. The model classes are registered
from the first configuration built (`RegistersModels`): a saved model is always read through its configuration first,
so `AutoModel*.from_pretrained` finds its class after a bare `import constrained_sft`.

May import: nothing of the package (transformers' configuration classes only).
"""

from __future__ import annotations

import importlib
import math
from typing import TYPE_CHECKING, Literal

from huggingface_hub.dataclasses import strict
from transformers.configuration_utils import PreTrainedConfig, SubConfigSpec
from transformers.models.auto.configuration_auto import AutoConfig

POOLINGS = ("cls", "mean")
Pooling = Literal["cls", "mean"]
# the modules that define (and register) the model classes, imported once a configuration of theirs is built
MODEL_MODULES = ("pooled_linear", "ut", "dust", "video_ut", "vit_denoiser")


def register_models() -> None:
    """Import the model modules, each registering its classes with the Auto classes (a no-op once done)."""
    for name in MODEL_MODULES:
        importlib.import_module(f"{__package__}.{name}")


if TYPE_CHECKING:  # a mixin of configurations: to the checker, one (its `__post_init__` is theirs)
    _Configuration = PreTrainedConfig
else:
    _Configuration = object


class RegistersModels(_Configuration):
    """A configuration whose construction registers the model classes: what `AutoModel*.from_pretrained` reads first,
    so by the time it looks for the model class of a saved configuration, the class is registered."""

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        register_models()


def label_count(config: PreTrainedConfig) -> int:
    """C, the classes a classifier's readout predicts (`num_labels`, which a built config always has: it defaults
    to 2)."""
    if config.num_labels is None:
        raise ValueError(f"{type(config).__name__} has no `num_labels` (nor `id2label`): a classifier needs them.")
    return config.num_labels


def set_regression(config) -> None:
    """Denoisers are scored by squared error: what `ConstrainedTrainer` reads to pick its per-example loss."""
    config.problem_type = "regression"
    if config.data_std is not None and not (math.isfinite(config.data_std) and config.data_std > 0):
        raise ValueError(
            f"`data_std` must be a finite number > 0 (sigma_x of the clean frames), got {config.data_std}."
        )


@strict
class PooledLinearConfig(RegistersModels, PreTrainedConfig):
    """`encoder`: the encoder's own config (any `AutoModel` config); `pooling`: one of `POOLINGS`."""

    model_type = "constrained-pooled-linear"
    sub_configs_defaults = {"encoder": SubConfigSpec(config_class=AutoConfig, model_type="bert")}

    encoder: dict | PreTrainedConfig | None = None
    pooling: Pooling = "cls"

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.pooling not in POOLINGS:
            raise ValueError(f"`pooling` must be one of {list(POOLINGS)}, got {self.pooling!r}.")

    def encoder_config(self) -> PreTrainedConfig:
        """The encoder's config (a dict given for `encoder` is one once the config is built). An AttributeError
        before then, as a missing attribute gives, so `getattr(config, name, default)` still answers its default."""
        if not isinstance(self.encoder, PreTrainedConfig):
            raise AttributeError(f"`encoder` is not an encoder's config yet (got {type(self.encoder).__name__})")
        return self.encoder

    @property
    def num_hidden_layers(self) -> int:
        return self.encoder_config().num_hidden_layers

    @property
    def hidden_size(self) -> int:
        return self.encoder_config().hidden_size


@strict
class UTConfig(RegistersModels, PreTrainedConfig):
    """Sizes of the unrolled transformer; `num_hidden_layers` = L (the paper's text UT has 3)."""

    model_type = "constrained-ut"

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 3
    max_position_embeddings: int = 512
    position_embeddings: bool = False
    attention_scale: bool = True
    pad_token_id: int | None = 0

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "max_position_embeddings"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be an integer >= 1, got {getattr(self, name)!r}.")


@strict
class DUSTConfig(RegistersModels, PreTrainedConfig):
    """Sizes and the fixed weights of DUST; `num_hidden_layers` = L unrolled steps."""

    model_type = "constrained-dust"

    patch_size: int = 16
    dictionary_atoms_per_side: int = 20  # m = 20^2 = 400 atoms for 256 pixels: 1.56x overcomplete
    num_hidden_layers: int = 3
    sparsity_weight: float = 0.02  # lambda_1, in grey levels of [0, 1]; theta = lambda_1 / c
    attention_weight: float = 0.2  # lambda_2
    tie_dictionaries: bool = False
    data_std: float | None = None  # sigma_x of the clean training frames, the noise scale

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.num_hidden_layers < 1 or self.patch_size < 1:
            raise ValueError(
                f"`num_hidden_layers` and `patch_size` must be >= 1, got {self.num_hidden_layers}, {self.patch_size}."
            )
        if self.sparsity_weight < 0 or not 0 <= self.attention_weight <= 1:
            raise ValueError(
                f"`sparsity_weight` must be >= 0 and `attention_weight` in [0, 1], got {self.sparsity_weight}, "
                f"{self.attention_weight}."
            )
        set_regression(self)

    @property
    def num_atoms(self) -> int:
        return self.dictionary_atoms_per_side**2


@strict
class VideoUTConfig(RegistersModels, PreTrainedConfig):
    """`num_hidden_layers` = L; the width is 2 m, m = `dictionary_atoms_per_side`^2 DCT atoms."""

    model_type = "constrained-video-ut"

    patch_size: int = 16
    dictionary_atoms_per_side: int = 16  # m = 256: the complete DCT basis; width 512
    num_hidden_layers: int = 3
    attention_scale: bool = True
    data_std: float | None = None

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.num_hidden_layers < 1 or self.patch_size < 1:
            raise ValueError(
                f"`num_hidden_layers` and `patch_size` must be >= 1, got {self.num_hidden_layers}, {self.patch_size}."
            )
        set_regression(self)

    @property
    def hidden_size(self) -> int:
        return 2 * self.dictionary_atoms_per_side**2


CONFIGS = (PooledLinearConfig, UTConfig, DUSTConfig, VideoUTConfig)


def register_configs(*configs: type[PreTrainedConfig]) -> None:
    """Each configuration under its `model_type` with `AutoConfig` (a no-op for one already there)."""
    for config in configs:
        AutoConfig.register(config.model_type, config, exist_ok=True)


register_configs(*CONFIGS)
