"""The package's cache folder (the content ids of local data, the help texts, the dequantized SmolLM2)."""

from __future__ import annotations

import os


def cache_root() -> str:
    """`$CONSTRAINED_SFT_CACHE`, else `$XDG_CACHE_HOME/constrained-sft`, else `~/.cache/constrained-sft`."""
    if "CONSTRAINED_SFT_CACHE" in os.environ:
        return os.environ["CONSTRAINED_SFT_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    return os.path.join(base, "constrained-sft")
