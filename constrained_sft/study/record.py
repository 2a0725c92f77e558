"""
What a study keeps of each run, phase by phase: the phases a run goes through, and `RunRecord`, written where the
study folder keeps it (`folder.StudyFolder.record`: `runs/<arm>-seed<s>.json`) as each phase ends. A study continues
and reports from these records alone, weights deleted or not.

    runs/<arm>-seed<s>.json   {"run", "study", "sigma_x", "model", "jobs": {phase: runs at once}, "seconds": {phase: measured},
                               "estimates": {phase: estimated}, "robustness": ModelResult | null,
                               "empty_answers": {gamma: count} | null, "exits": ExitsModel | null,
                               "requeues": [{"why", "phase", "restart", "job"}] (only where its Slurm job was requeued)}

`seconds` holds the phases done (wall seconds, measured where they ran, with `jobs[phase]` runs sharing the device);
`estimates` what the plan priced each at before it started. Records of earlier versions (`seconds` with `generation`
and `total`, every phase at once) load as records of their phases.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..comparison import RunKey
from ..data import has_weights, model_fingerprint
from ..evaluation import ExitsModel, ModelResult
from ..utils.files import read_json, write_json
from ..utils.types import JSONObject, JSONRead
from .study_folder import StudyFolder

T = TypeVar("T")

TRAIN, ROBUSTNESS, ANSWERS, EXITS = "train", "robustness", "answers", "exits"
PHASES = (TRAIN, ROBUSTNESS, ANSWERS, EXITS)
LEGACY_PHASES = {"generation": ANSWERS}  # the seconds key of records before phases were recorded one by one


@dataclass
class RunRecord:
    """The phases of a run done so far and their results (see the module docstring)."""

    run: str
    study: str | None = None  # the study's id (`folder.StudyFolder.identity`; None: written by an earlier version)
    sigma_x: float | None = None
    model: str | None = None  # the weights' fingerprint when they were measured
    jobs: dict[str, int] = field(default_factory=dict)  # per phase: runs sharing the device while it ran
    seconds: dict[str, float] = field(default_factory=dict)
    estimates: dict[str, float] = field(default_factory=dict)
    robustness: ModelResult | None = None
    empty_answers: dict[str, int] | None = None
    exits: ExitsModel | None = None
    # each time its Slurm job was requeued: why ("time limit", or Slurm's own requeue), the phase it was in, Slurm's
    # restart count and the job's id (`study.cluster.job_main`)
    requeues: list[dict[str, str | int]] = field(default_factory=list)

    def done(self, phase: str) -> bool:
        return phase in self.seconds

    def to_dict(self, key: str) -> JSONObject:
        return {
            "run": self.run,
            "study": self.study,
            "sigma_x": self.sigma_x,
            "model": self.model,
            "jobs": self.jobs,
            "seconds": self.seconds,
            "estimates": self.estimates,
            "robustness": None if self.robustness is None else self.robustness.to_dict(key),
            "empty_answers": self.empty_answers,
            "exits": None if self.exits is None else self.exits.to_dict(),
            **({"requeues": self.requeues} if self.requeues else {}),
        }

    @classmethod
    def from_dict(cls, data: JSONRead, key: str, where: str = "the record") -> RunRecord:
        """A record as any version wrote it, checked first (`check_record`: refused naming `where` and the field)."""
        check_record(data, where)
        seconds = {LEGACY_PHASES.get(k, k): v for k, v in data.get("seconds", {}).items() if k != "total"}
        robustness = _parsed(data, "robustness", lambda v: ModelResult.from_dict(v, key), "a measurement", where)
        exits = _parsed(data, "exits", ExitsModel.from_dict, "an exit-layer result", where)
        return cls(
            run=data["run"],
            study=data.get("study"),
            sigma_x=data.get("sigma_x"),
            model=data.get("model"),
            jobs=dict(data.get("jobs", {})),
            seconds=seconds,
            estimates=data.get("estimates", {}),
            robustness=robustness,
            empty_answers=data.get("empty_answers"),
            exits=exits,
            requeues=list(data.get("requeues", [])),
        )


def _parsed(data: JSONRead, name: str, parse: Callable[[Any], T], what: str, where: str) -> T | None:
    """`data[name]` read by `parse` (None where absent); a value this version cannot read is a `RecordError`."""
    try:
        return None if data.get(name) is None else parse(data[name])
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise RecordError(f"{where}: `{name}` is not {what} this version reads ({error!r:.80}).") from None


class RecordError(ValueError):
    """A run record this version cannot trust: the message names the file, the field and what it must hold."""


NUMBER = (int, float)
# field -> (what it may hold, in words; the check)
SHAPES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "run": ("a run name (arm/seedN)", lambda v: isinstance(v, str)),
    "study": ("a study id (text) or null", lambda v: v is None or isinstance(v, str)),
    "sigma_x": ("a number or null", lambda v: v is None or (isinstance(v, NUMBER) and not isinstance(v, bool))),
    "model": ("a model fingerprint (text) or null", lambda v: v is None or isinstance(v, str)),
    "jobs": ("{phase: runs at once}", lambda v: isinstance(v, dict) and all(isinstance(n, int) for n in v.values())),
    "seconds": (
        f"{{phase: seconds}} with phases of {list(PHASES)}",
        lambda v: (
            isinstance(v, dict)
            and all(LEGACY_PHASES.get(k, k) in (*PHASES, "total") and isinstance(n, NUMBER) for k, n in v.items())
        ),
    ),
    "estimates": (
        "{phase: seconds}",
        lambda v: isinstance(v, dict) and all(isinstance(n, NUMBER) for n in v.values()),
    ),
    "robustness": ("a measurement or null", lambda v: v is None or isinstance(v, dict)),
    "empty_answers": (
        "{gamma: count} or null",
        lambda v: v is None or (isinstance(v, dict) and all(isinstance(n, int) for n in v.values())),
    ),
    "exits": ("an exit-layer result or null", lambda v: v is None or isinstance(v, dict)),
    "requeues": (
        "a list of {why, phase, restart}",
        lambda v: (
            isinstance(v, list) and all(isinstance(r, dict) and {"why", "phase", "restart"} <= set(r) for r in v)
        ),
    ),
}
# a phase recorded as done and the field that holds what it measured
PHASE_FIELDS = {ROBUSTNESS: "robustness", EXITS: "exits"}


def check_record(data: Any, where: str) -> None:
    """Refuse a record whose fields are of the wrong kind, or that says a phase is done without what it measured,
    in one line naming `where` and the field (`RecordError`)."""
    if not isinstance(data, dict):
        raise RecordError(f"{where} holds a {type(data).__name__}, not a run record (a JSON object).")
    for name, (allowed, ok) in SHAPES.items():
        if (name in data or name == "run") and not ok(data.get(name)):
            raise RecordError(f"{where}: `{name}` must be {allowed}, got {data.get(name)!r:.60}.")
    seconds = {LEGACY_PHASES.get(k, k) for k in data.get("seconds", {})}
    for phase, name in PHASE_FIELDS.items():
        if phase in seconds and data.get(name) is None:
            raise RecordError(
                f"{where}: the phase `{phase}` is recorded as done but `{name}` is null; delete the record (the run's "
                "phases are then done again)."
            )


def read_run_record(study: StudyFolder, run: RunKey, key: str) -> RunRecord | None:
    """The run's record, None when it has none yet, checked before it is trusted (`RecordError` naming the file and
    the field): its fields' kinds and phases (`check_record`), its run (not another run's file), and the weights it
    measured (its `model` fingerprint) against the run folder's where they are kept: the study would otherwise
    report one run's measurements, or another study's, as this run's."""
    path = study.record(run)
    if not os.path.isfile(path):
        return None
    data = read_json(path, "--study_dir")
    where = f"`--study_dir` {path}"
    if isinstance(data, dict) and isinstance(data.get("run"), str) and data["run"] != run.name:
        raise RecordError(
            f"{where} is the record of {data['run']!r}, not of {run.name!r}: a file moved or copied by hand; put it "
            "back or delete it (the run is then done again)."
        )
    record = RunRecord.from_dict(data, key, where)
    if record.study is not None and record.study != (own := study.identity()):
        raise RecordError(
            f"{where}: `study` {record.study} is not this study's id ({own or 'none: its study-id.txt is gone'}): a "
            "record of another study's run, copied in; delete it (the run is then done again)."
        )
    folder = study.run(run)
    if record.model is not None and has_weights(folder) and (found := model_fingerprint(folder)) != record.model:
        raise RecordError(
            f"{where}: `model` {record.model} is not the fingerprint of the weights in {folder} ({found}): a record of "
            "another study's run, or of weights trained since; delete the record (the run is then measured again)."
        )
    return record


def write_run_record(study: StudyFolder, record: RunRecord, key: str) -> JSONObject:
    """Write the record whole (atomically: a kill leaves the previous version); its JSON form."""
    path = study.record(RunKey.parse(record.run))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    record.study = study.identity()
    data = record.to_dict(key)
    write_json(path, data)
    return data
