"""
What descending layers buy at inference (`constrained-sft eval exits`), in one folder: its options (`arguments`), the
measurement and the command (`command`: self-speculative decoding per exit layer, each layer's readout of reference
answers), the results as types (`results`: exits.json) and their report (`report`: blocks and plots, which the study
shows too).
"""

from .arguments import ExitsArguments
from .command import measure_exits, run, write_exits
from .report import exits_blocks, exits_report
from .results import (
    EXITS_JSON,
    ExitsFolder,
    ExitsModel,
    ExitSpeedup,
    ExitsResults,
    ExitsSettings,
    LayerReadout,
    PromptMeasurements,
)

__all__ = [
    "EXITS_JSON",
    "ExitSpeedup",
    "ExitsArguments",
    "ExitsFolder",
    "ExitsModel",
    "ExitsResults",
    "ExitsSettings",
    "LayerReadout",
    "PromptMeasurements",
    "exits_blocks",
    "exits_report",
    "measure_exits",
    "run",
    "write_exits",
]
