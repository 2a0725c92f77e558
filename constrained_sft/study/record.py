"""
What a study keeps of each run, phase by phase: where a run's record is (`record_path`; the run itself is a
`tasks.arms.RunKey`), the phases a run goes through, and `RunRecord`, written to `runs/<arm>-seed<s>.json` as each phase ends. A study
continues and reports from these records alone, weights deleted or not.

    runs/<arm>-seed<s>.json   {"run", "sigma_x", "model", "jobs": {phase: runs at once}, "seconds": {phase: measured},
                               "estimates": {phase: estimated}, "robustness": ModelResult | null,
                               "empty_answers": {gamma: count} | null, "exits": ExitsModel | null}

`seconds` holds the phases done (wall seconds, measured where they ran, with `jobs[phase]` runs sharing the device);
`estimates` what the plan priced each at before it started. Records of earlier versions (`seconds` with `generation`
and `total`, every phase at once) load as records of their phases.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..evaluation.results import ExitsModel, ModelResult
from ..tasks.arms import RunKey
from ..utils.files import read_json, write_json
from ..utils.folders import child_path
from ..utils.types import JSONObject

TRAIN, ROBUSTNESS, ANSWERS, EXITS = "train", "robustness", "answers", "exits"
PHASES = (TRAIN, ROBUSTNESS, ANSWERS, EXITS)
RUNS = "runs"
# the study folder's other parts the runs write: every run's answers, the seed-0 models' exit-layer decoding, the data
# prepared once for every run
GENERATIONS, EXITS_DIR, DATA_DIR = "generations", "exits", "data"
LEGACY_PHASES = {"generation": ANSWERS}  # the seconds key of records before phases were recorded one by one


def record_path(study_dir: str, run: RunKey) -> str:
    """Where `run`'s record is: `runs/<arm>-seed<s>.json`."""
    return child_path(study_dir, RUNS, f"{run.stem}.json")


@dataclass
class RunRecord:
    """The phases of a run done so far and their results (see the module docstring)."""

    run: str
    sigma_x: float | None = None
    model: str | None = None  # the weights' fingerprint when they were measured
    jobs: dict[str, int] = field(default_factory=dict)  # per phase: runs sharing the device while it ran
    seconds: dict[str, float] = field(default_factory=dict)
    estimates: dict[str, float] = field(default_factory=dict)
    robustness: ModelResult | None = None
    empty_answers: dict[str, int] | None = None
    exits: ExitsModel | None = None

    def done(self, phase: str) -> bool:
        return phase in self.seconds

    def to_dict(self, key: str) -> JSONObject:
        return {"run": self.run, "sigma_x": self.sigma_x, "model": self.model, "jobs": self.jobs,
                "seconds": self.seconds, "estimates": self.estimates,
                "robustness": None if self.robustness is None else self.robustness.to_dict(key),
                "empty_answers": self.empty_answers,
                "exits": None if self.exits is None else self.exits.to_dict()}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any], key: str) -> RunRecord:
        seconds = {LEGACY_PHASES.get(k, k): v for k, v in data.get("seconds", {}).items() if k != "total"}
        robustness, exits = data.get("robustness"), data.get("exits")
        jobs = data.get("jobs", {})
        return cls(
            run=data["run"], sigma_x=data.get("sigma_x"), model=data.get("model"), jobs=dict(jobs),
            seconds=seconds, estimates=data.get("estimates", {}),
            robustness=None if robustness is None else ModelResult.from_dict(robustness, key),
            empty_answers=data.get("empty_answers"), exits=None if exits is None else ExitsModel.from_dict(exits),
        )  # fmt: skip


def read_record(study_dir: str, run: RunKey, key: str) -> RunRecord | None:
    """The run's record, None when it has none yet. A record of another run (its `run` is not this file's) is
    refused in one line: the study would report one run's measurements as another's."""
    path = record_path(study_dir, run)
    if not os.path.isfile(path):
        return None
    data = read_json(path, "--study_dir")
    if not isinstance(data, dict) or data.get("run") != run.name:
        found = data.get("run") if isinstance(data, dict) else type(data).__name__
        raise ValueError(
            f"`--study_dir` {path} is the record of {found!r}, not of {run.name!r}: a file moved or copied by hand; "
            "put it back or delete it (the run is then done again)."
        )
    return RunRecord.from_dict(data, key)


def write_record(study_dir: str, record: RunRecord, key: str) -> JSONObject:
    """Write the record whole (atomically: a kill leaves the previous version); its JSON form."""
    os.makedirs(child_path(study_dir, RUNS), exist_ok=True)
    data = record.to_dict(key)
    write_json(record_path(study_dir, RunKey.parse(record.run)), data)
    return data
