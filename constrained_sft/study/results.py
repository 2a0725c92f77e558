"""The study's results as a type, with its one JSON form (`study.json`, the layout earlier versions wrote)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..evaluation import RobustnessResults


def judging_dir(study_dir: str, model: str = "constrained", reference: str = "erm") -> str:
    """Where `model`'s answers judged against `reference`'s go: `judging/` for constrained vs ERM (the layout of
    two-arm studies), `judging/<model>-vs-<reference>/` for every other pair."""
    root = os.path.join(study_dir, "judging")
    return root if (model, reference) == ("constrained", "erm") else os.path.join(root, f"{model}-vs-{reference}")


ROBUSTNESS_KEYS = ("settings", "headline", "arms", "comparisons", "files")  # what study.json keeps of the evaluation


@dataclass
class StudyResults:
    """`settings`: the study's arguments, the twins' recipe and differences, the instructions and the budget;
    `head_to_head`: the AlpacaEval-style judging of the first arm's answers against the reference arm's per level
    (its own JSON form; constrained vs ERM by default); `more_head_to_heads`: every other `--arm` against the
    reference, by arm (absent from study.json when there is none)."""

    settings: dict[str, Any]
    versions: dict[str, str]
    robustness: RobustnessResults
    head_to_head: dict[str, Any]
    timings: dict[str, Any]
    more_head_to_heads: dict[str, dict[str, Any]] = field(default_factory=dict)
    exits: dict[str, Any] | None = None  # `eval exits` of each arm's seed-0 model (`evaluation.exits`)
    files: dict[str, str] = field(default_factory=dict)

    @property
    def budget(self) -> dict[str, Any]:
        return self.settings["budget"]

    def to_dict(self) -> dict[str, Any]:
        robustness = self.robustness.to_dict()
        return {
            "settings": self.settings,
            "versions": self.versions,
            "robustness": {k: robustness[k] for k in ROBUSTNESS_KEYS},
            "summaries": {name: m.summary for name, m in self.robustness.models.items()},
            "head_to_head": self.head_to_head,
            **({"more_head_to_heads": self.more_head_to_heads} if self.more_head_to_heads else {}),
            **({"exits": self.exits} if self.exits is not None else {}),
            "timings": self.timings,
            "files": self.files,
        }
