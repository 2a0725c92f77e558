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
    slurm/                               `--launcher slurm`: jobs.json (every job submitted), logs/<job id>/, logs/calls/
    instructions.jsonl, study.json, timings.json, report.html, report.md, win_rate[_<arm>]_vs_gamma.png, the marker
    study-id.txt                         the study's own id, which every run record carries (`identity`)
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass

from ..comparison import CONSTRAINED, ERM, TWINS, RunKey
from ..evaluation.alpaca import AnswersFolder, VerdictsFolder
from ..utils.output_folders import MARKER, child_path

TRAIN, RUNS, DATA, ROBUSTNESS, GENERATIONS, JUDGING, EXITS, SLURM = (
    "train", "runs", "data", "robustness", "generations", "judging", "exits", "slurm"
)  # fmt: skip
INSTRUCTIONS, STUDY_JSON, TIMINGS_JSON, STUDY_ID = "instructions.jsonl", "study.json", "timings.json", "study-id.txt"
REPORT_HTML, REPORT_MD = "report.html", "report.md"
FOLDERS = (
    TRAIN,
    RUNS,
    GENERATIONS,
    EXITS,
    DATA,
    ROBUSTNESS,
    JUDGING,
    SLURM,
)  # the folders the runs and the finish write
FILES = (STUDY_JSON, TIMINGS_JSON, INSTRUCTIONS, REPORT_HTML, REPORT_MD, MARKER, STUDY_ID)  # the files written whole


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

    def identity(self, create: bool = False) -> str | None:
        """The study's own id (32 hex digits, drawn when the study first writes its folder: `create`), which every run
        record carries: a record copied from another study is refused by it even where no weights are left to
        fingerprint (`--keep_models none`). None for a folder of an earlier version, until it is continued. The
        first of several processes to create it wins; the others read it."""
        path = os.path.join(self.root, STUDY_ID)
        if create and not os.path.lexists(path):
            try:
                handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                pass  # another process of the launch wrote it first
            else:
                with os.fdopen(handle, "w", encoding="utf-8") as f:
                    f.write(uuid.uuid4().hex + "\n")
                    f.flush()
                    os.fsync(f.fileno())
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read().strip()
        if not re.fullmatch(r"[0-9a-f]{32}", text):
            raise ValueError(
                f"`--study_dir` {path} holds {text[:40]!r}, not a study id (32 hex digits): restore it from the study's "
                "archive, or delete it (the next run draws a new one; records that carry the old one are then refused)."
            )
        return text

    @property
    def data(self) -> str:
        return os.path.join(self.root, DATA)

    @property
    def slurm(self) -> str:
        return os.path.join(self.root, SLURM)

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
        return AnswersFolder(self.generations).answers(run.stem, gamma)

    def verdicts(self, gamma: float, seed: int, model: str = CONSTRAINED, reference: str = ERM) -> str:
        """`model`'s answers judged against `reference`'s at level `gamma`, training seed pair `seed` (`eval
        alpaca`'s layout under `judging`)."""
        return VerdictsFolder(self.judging(model, reference)).verdicts(gamma, seed)

    def win_plot(self, arm: str | None = None) -> str:
        """The win-rate plot of the first head-to-head (`arm` None), or of `arm`'s against the reference."""
        return os.path.join(self.root, "win_rate_vs_gamma.png" if arm is None else f"win_rate_{arm}_vs_gamma.png")

    def check_parts(self) -> None:
        """Refuse, before any work, a study folder whose parts are in the way: a file where the study writes a
        folder (`data`, `runs`, ...) or a folder or link where it writes a file (`study.json`, ...), named with what
        to do; and a study id that is none (`identity`)."""
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
        self.identity()
