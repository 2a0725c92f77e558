"""
The ViT denoiser of the paper's video experiment (Section 4, Appendix B.2): a transformers `ViTModel` without its
classifier (and without its pooler), one frame at a time; every layer's output is read as a reconstruction through
one shared linear un-patching readout:

    psi(h) = Linear(LayerNorm(h[:, 1:]))     `[B, 1 + N, d]` -> `[B, N, P]`: each patch token back to its 16 x 16 pixels

with the ViT's own final LayerNorm inside psi (as the final norm of a causal LM is in its readout), so psi(h_L) is the
model's output. The input is the frame's N = (160/16)^2 = 100 patch tokens `[B, N, P]` (the same pixel tokens the
noise perturbs for every denoiser), folded back into the frame, normalised like the ViT image processor
(`(x - pixel_mean) / pixel_std`), repeated over the colour channels a pretrained ViT expects, and embedded by the
ViT's patch embedding; a pretrained ViT made for 224 x 224 images interpolates its position embeddings to the frame.

Pretrained weights (B.2: "ViT is initialized to pretrained weights") come with `from_pretrained_vit(path)` (for
example `google/vit-base-patch16-224-in21k` from the Hub); offline, a config-built ViT (random init) trains instead.
"""

from __future__ import annotations

from torch import nn
from transformers import AutoModel, ViTConfig, ViTModel
from transformers.models.vit.modeling_vit import ViTPreTrainedModel

from ..utils.patches import unpatchify
from .denoising import DenoiserMixin, PixelInput
from .vit_config import ViTDenoiserConfig


class ViTForDenoising(DenoiserMixin, ViTPreTrainedModel):
    """Pixel tokens of one frame `[B, N, P]` -> its reconstruction `[B, N, P]`."""

    config_class = ViTDenoiserConfig
    main_input_name = "input_values"

    def __init__(self, config: ViTDenoiserConfig) -> None:
        super().__init__(config)
        self.vit = ViTModel(config, add_pooling_layer=False)
        self.unpatch = nn.Linear(config.hidden_size, config.patch_pixels)  # the shared linear un-patching
        self.pixels = PixelInput(config.data_std)
        self.post_init()

    @classmethod
    def from_pretrained_vit(cls, path: str, revision: str | None = None, **config_kwargs):
        """A denoiser whose ViT is the pretrained `path` (a folder or Hub id); the readout starts at random."""
        vit = ViTModel.from_pretrained(path, revision=revision or "main", add_pooling_layer=False)
        fields = {k: v for k, v in vit.config.to_dict().items() if k in ViTConfig.__dataclass_fields__}
        fields.pop("model_type", None)
        model = cls(ViTDenoiserConfig(**{**fields, "architectures": [cls.__name__], **config_kwargs}))
        model.vit.load_state_dict(vit.state_dict())
        return model

    def backbone(self, noisy):
        """The ViT's hidden states (embeddings, then each layer), each `[B, 1 + N, d]`."""
        c = self.config
        frames = unpatchify(noisy, c.patch_size, c.frame_size, c.frame_size)  # [B, F, F]
        images = ((frames - c.pixel_mean) / c.pixel_std)[:, None].expand(-1, c.num_channels, -1, -1)
        out = self.vit(
            pixel_values=images.contiguous(),
            output_hidden_states=True,
            interpolate_pos_encoding=c.frame_size != c.image_size,
        )
        return list(out.hidden_states)

    def readout(self, hidden, attention_mask=None):
        """psi: drop [CLS], the ViT's final LayerNorm, then the shared linear un-patching `[B, N, P]`."""
        return self.unpatch(self.vit.layernorm(hidden[:, 1:]))


AutoModel.register(ViTDenoiserConfig, ViTForDenoising, exist_ok=True)
