"""`python -m constrained_sft.testing study-assets ROOT` (see `study_assets`) and `... tiny-vlm DIR [--arch A]` (see
`vlm.write_tiny_vlm`)."""

import sys

from . import study_assets
from .vlm import main as tiny_vlm_main

if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "tiny-vlm":
        tiny_vlm_main(sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "study-assets":
        study_assets(sys.argv[2])
    else:
        sys.exit("usage: python -m constrained_sft.testing study-assets ROOT | tiny-vlm DIR [--arch A] [--rows N]")
