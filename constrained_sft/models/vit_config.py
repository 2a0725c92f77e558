"""
The ViT denoiser's configuration, registered with `AutoConfig` once transformers' modeling Auto module has loaded:
`ViTConfig`'s module reads that module while it is defined (its docstring decorator), so it cannot be imported while
transformers is still importing it (`configs` holds the other configurations, registered earlier). So a ViT
denoiser's configuration alone (`AutoConfig.from_pretrained`, before any `AutoModel*` was used) is recognised only once
transformers' modeling Auto module is loaded; `AutoModel.from_pretrained` loads it first and always works.

May import: nothing of the package but `configs`.
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers.models.vit.configuration_vit import ViTConfig

from .configs import RegistersModels, register_configs, set_regression


@strict
class ViTDenoiserConfig(RegistersModels, ViTConfig):
    """A `ViTConfig` plus the frame it denoises: `frame_size` (160), the pixel normalisation and sigma_x."""

    model_type = "constrained-vit-denoiser"

    frame_size: int = 160
    pixel_mean: float = 0.5
    pixel_std: float = 0.5
    data_std: float | None = None

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if not isinstance(self.patch_size, int):
            raise ValueError(f"`patch_size` must be one integer (square patches), got {self.patch_size!r}.")
        if self.frame_size % self.patch_size:
            raise ValueError(
                f"`frame_size` ({self.frame_size}) must be a multiple of `patch_size` ({self.patch_size})."
            )
        set_regression(self)

    @property
    def patch_pixels(self) -> int:
        """P, the grey levels of one square patch (`patch_size`^2)."""
        if not isinstance(self.patch_size, int):
            raise ValueError(f"`patch_size` must be one integer (square patches), got {self.patch_size!r}.")
        return self.patch_size**2


register_configs(ViTDenoiserConfig)
