"""A sweep's results as types, with their one JSON form (`comparison.json`, the layout earlier versions wrote): each
arm's trials and best trial, and (after the comparison stage) the retrained arms compared on the held-out data."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..evaluation import Comparison, ReportFiles
from ..utils.fields import known_keys
from ..utils.files import read_saved, write_json
from ..utils.types import JSONObject, JSONRead
from .arguments import SweepArguments
from .space import Params, ParamValue

COMPARISON_JSON = "comparison.json"


@dataclass(frozen=True)
class Trial:
    """One trial of an arm's search: its number, Optuna's state, its objective value (None unless complete), the
    values of the arm's searched fields and what it recorded (the validation scores, the worker). Its JSON and CSV
    form is one flat row, `trial`, `state`, `value`, then the fields, then the records."""

    trial: int
    state: str
    value: float | None
    params: Params
    records: dict[str, ParamValue] = field(default_factory=dict)  # Optuna's user attributes: numbers and names

    def row(self) -> JSONObject:
        return {"trial": self.trial, "state": self.state, "value": self.value, **self.params, **self.records}

    @classmethod
    def from_row(cls, row: Mapping[str, Any], searched: list[str]) -> Trial:
        """A trial as `row()` wrote it (the values of a CSV / JSON row: the dataclass types them)."""
        fixed = ("trial", "state", "value")
        params = {k: v for k, v in row.items() if k in searched}
        records = {k: v for k, v in row.items() if k not in fixed and k not in searched}
        return cls(row["trial"], row["state"], row["value"], params, records)


@dataclass
class ArmTrials:
    """One arm's search: every trial, the best complete trial (None before one), Optuna's plots, the fields searched
    and those of the fallback section left out because the arm never reads them."""

    trials: list[Trial]
    best: Trial | None
    plots: dict[str, str]
    searched: list[str]
    not_searched: list[str]

    def to_dict(self) -> JSONObject:
        return {
            "trials": [t.row() for t in self.trials],
            "best": None if self.best is None else self.best.row(),
            "plots": self.plots,
            "searched": self.searched,
            "not_searched": self.not_searched,
        }

    @classmethod
    def from_dict(cls, data: JSONRead) -> ArmTrials:
        data = known_keys(cls, data, "sweep arm")
        best = data["best"]
        return cls(
            trials=[Trial.from_row(r, data["searched"]) for r in data["trials"]],
            best=None if best is None else Trial.from_row(best, data["searched"]),
            plots=data["plots"],
            searched=data["searched"],
            not_searched=data["not_searched"],
        )


@dataclass
class SweepResults:
    """`settings`: the sweep's options (the storage URL without its password); `arms`: each arm's trials; after the
    comparison stage, `comparisons` of the retrained arms on the held-out data, the held-out evaluation's files
    (`test_report`) and its headline-vs-gamma plot (`arm_plot`)."""

    settings: SweepArguments
    arms: dict[str, ArmTrials]
    comparisons: dict[str, Comparison] | None = None
    test_report: ReportFiles = field(default_factory=dict)
    arm_plot: str | None = None

    @property
    def compared(self) -> bool:
        return self.comparisons is not None

    def to_dict(self) -> JSONObject:
        out: JSONObject = {
            "settings": dataclasses.asdict(self.settings),
            "arms": {name: a.to_dict() for name, a in self.arms.items()},
        }
        if self.comparisons is not None:
            out["comparison"] = {name: c.to_dict() for name, c in self.comparisons.items()}
            out["test_report"], out["arm_plot"] = self.test_report, self.arm_plot
        return out

    @classmethod
    def from_dict(cls, data: JSONRead) -> SweepResults:
        allowed = {"settings", "arms", "comparison", "test_report", "arm_plot"}
        if unknown := sorted(set(data) - allowed):
            raise ValueError(f"sweep results: unknown key(s) {unknown}; known: {sorted(allowed)}")
        given = known_keys(SweepArguments, data["settings"], "sweep settings")
        settings = SweepArguments(**{k: v for k, v in given.items() if k != "sweep_dir"})
        settings.sweep_dir = data["settings"].get("sweep_dir")  # kept as written: no folder check on a read
        comparison = data.get("comparison")
        return cls(
            settings=settings,
            arms={name: ArmTrials.from_dict(a) for name, a in data["arms"].items()},
            comparisons=None
            if comparison is None
            else {name: Comparison.from_dict(name, rows) for name, rows in comparison.items()},
            test_report=data.get("test_report", {}),
            arm_plot=data.get("arm_plot"),
        )

    def save(self, sweep_dir: str) -> str:
        path = os.path.join(sweep_dir, COMPARISON_JSON)
        write_json(path, self.to_dict())
        return path

    @classmethod
    def load(cls, sweep_dir: str) -> SweepResults | None:
        return read_saved(sweep_dir, COMPARISON_JSON, cls.from_dict, "--sweep_dir")
