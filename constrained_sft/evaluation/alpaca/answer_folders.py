"""
The folders of the two AlpacaEval commands as typed objects, their every path named here once: `eval generate`'s
answers (`AnswersFolder`) and `eval alpaca`'s verdicts (`VerdictsFolder`). The commands write through them; the study
and the tests read through them.

    <answers>/<model>/settings.json        what the model's answers were made with (`settings`)
    <answers>/<model>/gamma_<g>.json       its answers at level g (`answers`)
    <verdicts>/alpaca_eval.json            the head-to-head (`results_json`), with its part of report.html (`page`)
    <verdicts>/gamma_<g>/verdicts-<s>.json the verdicts of training seed pair s, both orders (`verdicts`)
    <verdicts>/gamma_<g>/annotations-<s>.json   alpaca_eval's raw completions (`annotations`)
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import ClassVar

from ...utils.output_folders import child_path
from ..report.result_folder import ResultsFolder
from .results import ALPACA_JSON


def level_name(gamma: float) -> str:
    """`gamma_<g>`, the stem both commands file a level under."""
    return f"gamma_{float(gamma)}"


@dataclass(frozen=True)
class AnswersFolder:
    """`eval generate`'s folder at `root` (`--output_dir`, the study's `generations/`)."""

    root: str

    def model(self, name: str) -> str:
        """`name`'s folder (its settings and one file per level)."""
        return child_path(self.root, name)

    def settings(self, name: str) -> str:
        return os.path.join(self.model(name), "settings.json")

    def answers(self, name: str, gamma: float) -> str:
        return os.path.join(self.model(name), f"{level_name(gamma)}.json")

    def levels(self, name: str) -> list[float]:
        """The levels `name` has answers for, ascending."""
        files = glob.glob(os.path.join(self.model(name), "gamma_*.json"))
        return sorted(float(os.path.basename(f)[len("gamma_") : -len(".json")]) for f in files)


@dataclass(frozen=True)
class VerdictsFolder(ResultsFolder):
    """`eval alpaca`'s folder at `root` (`--output_dir`, the study's `judging/[<model>-vs-<reference>/]`)."""

    RESULTS: ClassVar[str] = ALPACA_JSON

    def level(self, gamma: float) -> str:
        return os.path.join(self.root, level_name(gamma))

    def verdicts(self, gamma: float, seed: int) -> str:
        return os.path.join(self.level(gamma), f"verdicts-{seed}.json")

    def annotations(self, gamma: float, seed: int) -> str:
        return os.path.join(self.level(gamma), f"annotations-{seed}.json")
