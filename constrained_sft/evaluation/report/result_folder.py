"""An evaluation's result folder as a typed object: each evaluation names its files once, in its own package
(`RobustnessFolder`, `ExitsFolder`, `HarnessFolder`, alpaca's `AnswersFolder` and `VerdictsFolder`), and whoever reads
its outputs (the study, a report, a test) asks it for a path instead of joining one by hand."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from .page import PAGE


@dataclass(frozen=True)
class ResultsFolder:
    """The folder at `root` an evaluation writes: its results file (`RESULTS`, the subclass's) and the folder's one
    report page (`page`: every evaluation written there adds its part)."""

    root: str
    RESULTS: ClassVar[str]

    @property
    def results_json(self) -> str:
        return os.path.join(self.root, self.RESULTS)

    @property
    def page(self) -> str:
        return os.path.join(self.root, PAGE)

    def figure(self, stem: str) -> str:
        """A plot of the evaluation's, `<root>/<stem>.png`."""
        return os.path.join(self.root, f"{stem}.png")
