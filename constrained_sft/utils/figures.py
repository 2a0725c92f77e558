"""matplotlib on its file backend, and figures written atomically."""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING

from .files import atomic_path

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Figure, path: str, dpi: int = 120) -> str:
    """Lay out, write `fig` to `path` atomically (format from the extension) and close it."""
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format=os.path.splitext(path)[1][1:])
    pyplot().close(fig)
    return path
