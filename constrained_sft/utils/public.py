"""
The import paths a user may rely on, and the old paths of what moved.

`PUBLIC_MODULES`: the package and the subpackages whose `__init__` is their public face (registries, variant bases,
configs, trainers, folder objects, argument dataclasses); each module's `__all__` is its public names. A name
imported from anywhere else is internal and may move without notice. The Python API reference lists them
(`docs/generate_reference.py`), and `tests/test_public_names.py` imports each in a fresh interpreter.

`MOVED_MODULES`: {old path: new path} of the modules renamed or moved since the previous release. The old path stays
importable for at least one release: a module left there calls `moved_module`, which warns (FutureWarning, naming the
new path) and hands the importer the new module, as TRL and transformers keep a moved name importable.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Mapping
from types import MappingProxyType

PUBLIC_MODULES: tuple[str, ...] = (
    "constrained_sft",
    "constrained_sft.comparison",
    "constrained_sft.config",
    "constrained_sft.constraints",
    "constrained_sft.data",
    "constrained_sft.evaluation",
    "constrained_sft.evaluation.alpaca",
    "constrained_sft.launch",
    "constrained_sft.models",
    "constrained_sft.noise",
    "constrained_sft.readout",
    "constrained_sft.study",
    "constrained_sft.sweep",
    "constrained_sft.tasks",
    "constrained_sft.trainers",
)

# old -> new (issue 81 renamed the alpaca modules and the record writer; issue 88 moved the device pool; issue 91
# named the folder modules for their folders)
MOVED_MODULES: Mapping[str, str] = MappingProxyType(
    {
        "constrained_sft.evaluation.alpaca.judge_kinds": "constrained_sft.evaluation.alpaca.judge_registry",
        "constrained_sft.evaluation.alpaca.judges": "constrained_sft.evaluation.alpaca.annotator_configs",
        "constrained_sft.evaluation.alpaca.judging": "constrained_sft.evaluation.alpaca.judge_command",
        "constrained_sft.evaluation.alpaca.kept": "constrained_sft.evaluation.alpaca.verdict_journal",
        "constrained_sft.utils.written": "constrained_sft.utils.written_record",
        "constrained_sft.study.devices": "constrained_sft.launch.devices",
        # issue 91: module names that say which folder
        "constrained_sft.utils.folders": "constrained_sft.utils.output_folders",
        "constrained_sft.study.folder": "constrained_sft.study.study_folder",
        "constrained_sft.comparison.folder": "constrained_sft.comparison.comparison_folder",
        "constrained_sft.evaluation.report.folder": "constrained_sft.evaluation.report.result_folder",
        "constrained_sft.evaluation.alpaca.folders": "constrained_sft.evaluation.alpaca.answer_folders",
    }
)


def moved_module(old: str) -> None:
    """Called by the module left at `old` (a key of `MOVED_MODULES`): warns that it moved, naming the new path, and
    puts the new module in its place, so `from old import Name` gives the new module's `Name` (the same object)."""
    new = MOVED_MODULES[old]
    warnings.warn(
        f"`{old}` moved to `{new}`: import from there (the old path goes in a later release).",
        FutureWarning,
        stacklevel=3,  # the importer's line: moved_module <- the old module <- the import
    )
    sys.modules[old] = importlib.import_module(new)
