"""
A study folder, every path in it named once (`StudyFolder`): the study's modules ask it for a path, none joins one by
hand, and a reader finds a file where its writer put it.

    train/<arm>/seed<s>/                 the trained runs (`run`: the comparison layer's `RunKey.folder`)
    runs/<arm>-seed<s>.json              each run's record (`record`)
    data/                                the data prepared once for every run
    robustness/                          the comparisons over every recorded run (results.json, report.html)
    generations/<arm>-seed<s>/gamma_<g>.json   every run's answers (`answers`: `eval generate`'s layout)
    judging/[<model>-vs-<reference>/]    the head-to-heads (`verdicts`: `eval alpaca`'s gamma_<g>/verdicts-<s>.json)
    exits/                               the seed-0 models' exit-layer decoding
    instructions.jsonl, study.json, timings.json, report.html, report.md, win_rate[_<arm>]_vs_gamma.png, the marker
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..comparison import CONSTRAINED, ERM, TWINS, RunKey
from ..evaluation.alpaca.generate import output_path
from ..evaluation.alpaca.judging import level_dir, verdicts_file
from ..utils.folders import MARKER, child_path

TRAIN, RUNS, DATA, ROBUSTNESS, GENERATIONS, JUDGING, EXITS = (
    "train", "runs", "data", "robustness", "generations", "judging", "exits"
)  # fmt: skip
INSTRUCTIONS, STUDY_JSON, TIMINGS_JSON = "instructions.jsonl", "study.json", "timings.json"
REPORT_HTML, REPORT_MD = "report.html", "report.md"
FOLDERS = (TRAIN, RUNS, GENERATIONS, EXITS, DATA, ROBUSTNESS, JUDGING)  # the folders the runs and the finish write
FILES = (STUDY_JSON, TIMINGS_JSON, INSTRUCTIONS, REPORT_HTML, REPORT_MD, MARKER)  # the files written whole


@dataclass(frozen=True)
class StudyFolder:
    """The paths of the study folder at `root` (`--study_dir`)."""

    root: str

    def run(self, run: RunKey) -> str:
        """The run's training folder, `train/<arm>/seed<s>`."""
        return run.folder(self.root, TRAIN)

    def record(self, run: RunKey) -> str:
        """The run's record, `runs/<arm>-seed<s>.json`."""
        return child_path(self.root, RUNS, f"{run.stem}.json")

    @property
    def data(self) -> str:
        return os.path.join(self.root, DATA)

    @property
    def robustness(self) -> str:
        return os.path.join(self.root, ROBUSTNESS)

    @property
    def generations(self) -> str:
        return os.path.join(self.root, GENERATIONS)

    @property
    def exits(self) -> str:
        return os.path.join(self.root, EXITS)

    @property
    def instructions(self) -> str:
        return os.path.join(self.root, INSTRUCTIONS)

    @property
    def study_json(self) -> str:
        return os.path.join(self.root, STUDY_JSON)

    @property
    def report_html(self) -> str:
        return os.path.join(self.root, REPORT_HTML)

    @property
    def report_md(self) -> str:
        return os.path.join(self.root, REPORT_MD)

    def judging(self, model: str = CONSTRAINED, reference: str = ERM) -> str:
        """Where `model`'s answers judged against `reference`'s go: `judging/` for constrained vs ERM (the layout of
        two-arm studies), `judging/<model>-vs-<reference>/` for every other pair."""
        root = os.path.join(self.root, JUDGING)
        return root if (model, reference) == TWINS else child_path(root, f"{model}-vs-{reference}")

    def answers(self, run: RunKey, gamma: float) -> str:
        """The run's answers at level `gamma`, `generations/<arm>-seed<s>/gamma_<g>.json` (`eval generate`'s
        layout)."""
        return output_path(self.generations, run.stem, gamma)

    def verdicts(self, gamma: float, seed: int, model: str = CONSTRAINED, reference: str = ERM) -> str:
        """`model`'s answers judged against `reference`'s at level `gamma`, training seed pair `seed` (`eval
        alpaca`'s layout under `judging`)."""
        return verdicts_file(level_dir(self.judging(model, reference), gamma), seed)

    def win_plot(self, arm: str | None = None) -> str:
        """The win-rate plot of the first head-to-head (`arm` None), or of `arm`'s against the reference."""
        return os.path.join(self.root, "win_rate_vs_gamma.png" if arm is None else f"win_rate_{arm}_vs_gamma.png")

    def check_parts(self) -> None:
        """Refuse, before any work, a study folder whose parts are in the way: a file where the study writes a
        folder (`data`, `runs`, ...) or a folder or link where it writes a file (`study.json`, ...), named with what
        to do."""
        for name in FOLDERS:
            path = os.path.join(self.root, name)
            if os.path.lexists(path) and not os.path.isdir(path):
                raise ValueError(
                    f"`--study_dir` {path} is a file where the study keeps its `{name}` folder; move it away (or "
                    "give another --study_dir)."
                )
        for name in FILES:
            path = os.path.join(self.root, name)
            if os.path.lexists(path) and (os.path.islink(path) or not os.path.isfile(path)):
                raise ValueError(
                    f"`--study_dir` {path} is a {'link' if os.path.islink(path) else 'folder'} where the study writes "
                    f"its {name}; move it away (or give another --study_dir)."
                )
