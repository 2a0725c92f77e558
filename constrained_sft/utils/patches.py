"""Video frames cut into non-overlapping patches and put back (the denoisers' token sequences)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def patchify(frames: torch.Tensor, patch: int) -> torch.Tensor:
    """Frames `[..., H, W]` -> non-overlapping row-major patches `[..., (H/p)(W/p), p*p]` (a view when possible)."""
    *lead, H, W = frames.shape
    x = frames.reshape(*lead, H // patch, patch, W // patch, patch).movedim(-3, -2)  # [..., H/p, W/p, p, p]
    return x.reshape(*lead, (H // patch) * (W // patch), patch * patch)


def unpatchify(patches: torch.Tensor, patch: int, height: int, width: int) -> torch.Tensor:
    """The inverse of [`patchify`]: `[..., (H/p)(W/p), p*p]` -> `[..., H, W]`."""
    *lead, _, _ = patches.shape
    x = patches.reshape(*lead, height // patch, width // patch, patch, patch).movedim(-2, -3)
    return x.reshape(*lead, height, width)
