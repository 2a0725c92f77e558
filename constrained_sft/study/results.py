"""The study's results as types, with their one JSON form (`study.json`, the layout earlier versions wrote: the
published study in docs/ loads)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from ..evaluation import (
    Comparison,
    ExitsResults,
    HeadToHead,
    ModelSummary,
    ReportFiles,
    RobustnessResults,
    RobustnessSettings,
)
from ..tasks import Headline
from ..utils.fields import known_keys
from ..utils.files import read_saved, write_json
from ..utils.redact import redact_url
from ..utils.types import JSONObject, JSONRead
from .arguments import StudyArguments
from .study_folder import STUDY_JSON, TIMINGS_JSON


@dataclass(frozen=True)
class StudyRobustness:
    """What the study keeps of its robustness evaluation: the settings, headline, arms, comparisons, files and each
    model's summary (the per-unit scores behind the intervals stay in `<study_dir>/robustness/results.json`,
    `RobustnessResults.load`)."""

    settings: RobustnessSettings
    headline: Headline
    arms: dict[str, list[str]]
    comparisons: dict[str, Comparison]
    files: ReportFiles
    summaries: dict[str, ModelSummary]

    @classmethod
    def of(cls, results: RobustnessResults) -> StudyRobustness:
        return cls(
            results.settings, results.headline, results.arms, results.comparisons, results.files, results.summaries
        )

    def to_dict(self) -> tuple[JSONObject, JSONObject]:
        """(study.json's `robustness`, its `summaries`)."""
        key = self.headline.key
        kept: JSONObject = {
            "settings": self.settings.to_dict(),
            "headline": dataclasses.asdict(self.headline),
            "arms": self.arms,
            "comparisons": {name: c.to_dict() for name, c in self.comparisons.items()},
            "files": self.files,
        }
        return kept, {name: s.to_dict(key) for name, s in self.summaries.items()}

    @classmethod
    def from_dict(cls, kept: JSONRead, summaries: JSONRead) -> StudyRobustness:
        known_keys(cls, kept, "study robustness")
        headline = Headline(**kept["headline"])
        return cls(
            settings=RobustnessSettings.from_dict(kept["settings"]),
            headline=headline,
            arms=kept["arms"],
            comparisons={name: Comparison.from_dict(name, rows) for name, rows in kept["comparisons"].items()},
            files=kept["files"],
            summaries={name: ModelSummary.from_dict(s, headline.key) for name, s in summaries.items()},
        )


@dataclass(frozen=True)
class StudyBudget:
    """What the study spent: the numbers that bound what it can resolve."""

    training_seeds_per_arm: int
    max_steps: int
    batch: int
    max_length: int | None
    held_out_sequences: int | None
    noise_seeds: int
    generation_gammas: list[float]
    max_new_tokens: int
    runs_missing: list[str] = field(default_factory=list)  # runs (or a run's phases) left for the next call
    judged_seeds_per_arm: int | None = None  # seeds with every arm's answers, where fewer than the measured ones

    def to_dict(self) -> JSONObject:
        out = dataclasses.asdict(self)
        if not self.runs_missing:
            del out["runs_missing"]
        if self.judged_seeds_per_arm is None:
            del out["judged_seeds_per_arm"]
        return out


@dataclass(frozen=True)
class InstructionSet:
    """The instructions every model answered: where they came from and how many were used; for held-out first
    turns, how many held-out rows there were and why some were left out (seen in training, repeated, no exchange)."""

    source: str
    used: int
    is_full_alpaca_eval: bool | None = None  # recorded for a given instruction file, not for held-out turns
    held_out_rows: int | None = None
    in_training: int | None = None
    repeated: int | None = None
    no_exchange: int | None = None

    def to_dict(self) -> JSONObject:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass
class StudySettings:
    """The study's arguments, the constrained recipe's training config (its JSON form), how the other arms differ
    from it, the instructions and the budget."""

    study: StudyArguments
    constrained_recipe: JSONObject  # TrainingArguments.to_dict() of the constrained recipe
    twin_differences: list[str]
    instructions: InstructionSet
    budget: StudyBudget

    def to_dict(self) -> JSONObject:
        study = dataclasses.asdict(self.study)
        study["judge_base_url"] = redact_url(study.get("judge_base_url"))  # the server, never its key
        for name in ("judge_base_url", "judge_timeout"):  # an API judge's server and patience, where given (results
            if study.get(name) is None:  # of earlier versions, which had no such fields, read and write back the same)
                study.pop(name, None)
        return {
            "study": study,
            "constrained_recipe": self.constrained_recipe,
            "twin_differences": self.twin_differences,
            "instructions": self.instructions.to_dict(),
            "budget": self.budget.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: JSONRead) -> StudySettings:
        known_keys(cls, data, "study settings")
        given = known_keys(StudyArguments, data["study"], "study arguments")
        study = StudyArguments(**{k: v for k, v in given.items() if k != "study_dir"})
        study.study_dir = given.get("study_dir")  # kept as written: no folder check on a read
        return cls(
            study=study,
            constrained_recipe=data["constrained_recipe"],
            twin_differences=data["twin_differences"],
            instructions=InstructionSet(**known_keys(InstructionSet, data["instructions"], "study instructions")),
            budget=StudyBudget(**known_keys(StudyBudget, data["budget"], "study budget")),
        )


@dataclass
class StudyTimings:
    """Wall seconds: each training run (as timed when it ran), each stage (summed over the invocations that did its
    work), per run and phase what the plan estimated beside what it measured, and the probe's figures with the device
    they were measured on (`probe`: a later call on that device plans from them instead of probing again)
    (`timings.json`; this class is its one writer)."""

    train: dict[str, float]
    stages: dict[str, float]
    runs: dict[str, dict[str, dict[str, float | None]]] = field(default_factory=dict)
    probe: JSONRead | None = None
    requeues: dict[str, list[JSONRead]] = field(default_factory=dict)  # per run: its Slurm job's requeues

    def to_dict(self) -> JSONObject:
        return {
            "train": self.train,
            **self.stages,
            **({"runs": self.runs} if self.runs else {}),
            **({"probe": self.probe} if self.probe else {}),
            **({"requeues": self.requeues} if self.requeues else {}),
        }

    @classmethod
    def from_dict(cls, data: JSONRead) -> StudyTimings:
        stages = {k: v for k, v in data.items() if k not in ("train", "runs", "probe", "requeues")}
        probe = data.get("probe") if isinstance(data.get("probe"), dict) else None
        requeues = dict(data.get("requeues", {}))
        return cls(dict(data.get("train", {})), stages, dict(data.get("runs", {})), probe, requeues)

    def add_phase(self, run: str, phase: str, measured: float, estimate: float | None) -> None:
        """One finished phase of `run`: its seconds beside the plan's estimate (None: planned without one)."""
        if phase == "train":
            self.train[run] = measured
        else:
            self.stages[phase] = round(self.stages.get(phase, 0.0) + measured, 1)
        self.runs.setdefault(run, {})[phase] = {
            "estimate": None if estimate is None else round(estimate, 1),
            "measured": round(measured, 1),
        }

    def add_stage(self, stage: str, seconds: float) -> None:
        self.stages[stage] = round(self.stages.get(stage, 0.0) + seconds, 1)

    def save(self, study_dir: str) -> None:
        write_json(os.path.join(study_dir, TIMINGS_JSON), self.to_dict())

    @classmethod
    def load(cls, study_dir: str) -> StudyTimings:
        found = read_saved(study_dir, TIMINGS_JSON, cls.from_dict, "--study_dir")
        return found if found is not None else cls({}, {})


@dataclass
class TrainedRuns:
    """What `--stage train` leaves, or a call whose `--time_budget` ended before every arm finished a seed: each
    arm's run folders (one per training seed), the timings, and the runs not yet done."""

    folders: dict[str, list[str]]
    timings: StudyTimings
    missing: list[str] = field(default_factory=list)


@dataclass
class StudyResults:
    """`head_to_head`: the judging of the first arm's answers against the reference arm's per level (constrained vs
    ERM by default); `more_head_to_heads`: every other `--arm` against the reference, by arm (absent from study.json
    when there is none); `exits`: `eval exits` of each arm's seed-0 model (None with `--exit_prompts 0`)."""

    settings: StudySettings
    versions: dict[str, str]
    robustness: StudyRobustness
    head_to_head: HeadToHead | None  # None: no seed has every arm's answers yet
    timings: StudyTimings
    more_head_to_heads: dict[str, HeadToHead] = field(default_factory=dict)
    exits: ExitsResults | None = None
    files: dict[str, str] = field(default_factory=dict)

    @property
    def budget(self) -> StudyBudget:
        return self.settings.budget

    def to_dict(self) -> JSONObject:
        robustness, summaries = self.robustness.to_dict()
        more = {arm: head.to_dict() for arm, head in self.more_head_to_heads.items()}
        return {
            "settings": self.settings.to_dict(),
            "versions": self.versions,
            "robustness": robustness,
            "summaries": summaries,
            **({"head_to_head": self.head_to_head.to_dict()} if self.head_to_head is not None else {}),
            **({"more_head_to_heads": more} if more else {}),
            **({"exits": self.exits.to_dict()} if self.exits is not None else {}),
            "timings": self.timings.to_dict(),
            "files": self.files,
        }

    @classmethod
    def from_dict(cls, data: JSONRead) -> StudyResults:
        allowed = {f.name for f in dataclasses.fields(cls)} | {"summaries"}
        if unknown := sorted(set(data) - allowed):
            raise ValueError(f"study results: unknown key(s) {unknown}; known: {sorted(allowed)}")
        exits = data.get("exits")
        return cls(
            settings=StudySettings.from_dict(data["settings"]),
            versions=data["versions"],
            robustness=StudyRobustness.from_dict(data["robustness"], data["summaries"]),
            head_to_head=HeadToHead.from_dict(data["head_to_head"]) if "head_to_head" in data else None,
            timings=StudyTimings.from_dict(data["timings"]),
            more_head_to_heads={a: HeadToHead.from_dict(h) for a, h in data.get("more_head_to_heads", {}).items()},
            exits=None if exits is None else ExitsResults.from_dict(exits),
            files=data.get("files", {}),
        )

    @classmethod
    def load(cls, study_dir: str) -> StudyResults | None:
        return read_saved(study_dir, STUDY_JSON, cls.from_dict, "--study_dir")
