"""
Arms of a comparison given as recipes (`study --arm`, `sweep --arm`): `NAME=RECIPE.yaml` parsed and checked, the twin
check (what two recipes of one comparison may and may not differ in), and `RunKey`, one arm trained with one seed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

from ..config import ConstraintArguments, NoiseArguments
from ..trainers.resume import RUN_JSON, deciding
from ..utils.content import same_source
from ..utils.folders import OutputDirError, child_path, plain_name
from ..utils.types import JSONObject
from .base import Recipe
from .training import data_identity


@dataclasses.dataclass(frozen=True, order=True)
class RunKey:
    """One run of a comparison (a study's run, a sweep's retrained final): `arm` trained with `seed`. `name`
    ("arm/seedN") is how results, reports and plans say it; `stem` ("arm-seedN") names its files."""

    seed: int
    arm: str

    @property
    def name(self) -> str:
        return f"{self.arm}/seed{self.seed}"

    @property
    def stem(self) -> str:
        return f"{self.arm}-seed{self.seed}"

    def folder(self, root: str, kind: str = "train") -> str:
        """Its run folder: `root/kind/arm/seedN` (a study's `train/`, a sweep's `final/`)."""
        return child_path(root, kind, self.arm, f"seed{self.seed}")

    @classmethod
    def parse(cls, name: str) -> RunKey:
        match = re.fullmatch(r"(.+)/seed(\d+)", name)
        if match is None:
            raise ValueError(f"{name!r} is not a run name (arm/seedN).")
        return cls(int(match.group(2)), match.group(1))


BOOKKEEPING = {"output_dir", "logging_dir", "run_name", "seed", "model_init_kwargs", "resume_from_checkpoint"}


def twin_differences(constrained: Recipe, erm: Recipe, same_noise: bool = True) -> list[str]:
    """Training fields (not constraints, noise or bookkeeping) on which the twins differ; data, model or (with
    `same_noise`) noise differences are refused: the arms would not see the same data, start or perturbation. An arm
    of its own (`--arm`) may train with other noise (NEFTune's, say): its noise fields are listed instead."""
    refused = []
    for label, a, b in (("data", constrained.script, erm.script), ("model", constrained.model, erm.model)):
        da, db = dataclasses.asdict(a), dataclasses.asdict(b)
        refused += [f"{label} field `{k}` ({da[k]!r} vs {db[k]!r})" for k in da if k != "task" and da[k] != db.get(k)]
    noise = {f.name for f in dataclasses.fields(NoiseArguments)}
    constraint = {f.name for f in dataclasses.fields(ConstraintArguments)}
    ta, tb = vars(constrained.training), vars(erm.training)
    if same_noise:
        refused += [f"`{k}` ({ta[k]!r} vs {tb[k]!r})" for k in sorted(noise) if ta[k] != tb[k]]
    if refused:
        raise ValueError(
            "--config and --erm_config must be twins (same data, model and noise; they differ in constraints): they "
            f"differ in {'; '.join(refused)}."
        )
    skip = (noise if same_noise else set()) | constraint | BOOKKEEPING
    return [
        f"{k}: {ta[k]!r} vs {tb[k]!r}"
        for k in sorted(ta)
        if k not in skip and not k.startswith("_") and ta[k] != tb[k]
    ]


def recipe_identity(recipe: Recipe) -> dict:
    """What decides an arm's trained weights, but for the seed (the runs of one arm differ in it): its training
    fields (`trainers.resume.deciding`: all but paths, logging and speed), data fields with what a local source holds
    (`training.data_identity`: its content id) and model. A study or a sweep continues a folder only with the same, so
    no run of one recipe is mixed with runs of a changed one, or with runs of the same file before an edit."""
    training = {k: v for k, v in deciding(recipe.training.to_dict()).items() if k != "seed"}
    model = dataclasses.asdict(recipe.model) if recipe.model is not None else None
    return {"training": training, "data": data_identity(recipe.script), "model": model}


def check_same_data(saved: JSONObject | None, recipes: dict[str, Recipe], root: str, flag: str) -> None:
    """Refuse in one line, before any work, to continue a comparison folder (`root`, a study's or a sweep's) whose
    data has changed since its runs trained: against the content ids its marker's settings (`saved`) recorded, and
    against those its runs recorded (`run.json`; an earlier version's marker records none, its runs a fingerprint of
    their own: `utils.content.same_source`)."""
    if not saved:
        return
    for arm, recipe in recipes.items():
        current = data_identity(recipe.script)
        recorded = ((saved.get("arms") or {}).get(arm) or {}).get("data") or {}
        for field, value in (recorded.get("files") or {}).items():
            if (current.get("files") or {}).get(field) != value:
                raise data_changed(root, flag, current.get(field), value, (current.get("files") or {}).get(field))
    current = data_identity(next(iter(recipes.values())).script)  # every arm trains on the same data (the twin check)
    for path in run_files(root):
        try:
            with open(path, encoding="utf-8") as f:
                files = (json.load(f).get("data") or {}).get("files") or {}
        except (OSError, ValueError, AttributeError):
            continue  # a damaged run.json is the run's own refusal, when it resumes
        for field, value in files.items():
            if field in current and not same_source(value, current[field]):
                now = (current.get("files") or {}).get(field)
                raise data_changed(root, flag, current[field], value, now, os.path.dirname(path))


def data_changed(root: str, flag: str, source, recorded: str, now: str | None, run: str | None = None):
    """The refusal of a comparison folder whose data changed (see `check_same_data`)."""
    who = f"its run {os.path.relpath(run, root)}" if run else "it"
    kind = "content" if str(recorded).startswith("sha256:") else "an earlier version's fingerprint"
    return OutputDirError(
        f"`{flag}` {root}: {who} trained on {source!r} as it was then ({kind} {recorded}); it holds other data now "
        f"({now or 'gone'}), so the runs left would train on other rows than the ones recorded. Give a new `{flag}` "
        f"for the changed data, or move {root} away to start over."
    )


def run_files(root: str, depth: int = 4) -> list[str]:
    """The `run.json` of every trained run below `root` (a study's `train/<arm>/seed<s>/`, a sweep's trials and
    finals), `depth` folders down at most."""
    found = []
    base = root.rstrip(os.sep).count(os.sep)
    for folder, dirs, files in os.walk(root):
        if folder.count(os.sep) - base >= depth:
            dirs[:] = []
        dirs[:] = [d for d in dirs if not d.startswith("checkpoint-")]
        if RUN_JSON in files:
            found.append(os.path.join(folder, RUN_JSON))
    return sorted(found)


def arm_recipes(texts: list[str] | None, taken: tuple[str, ...]) -> dict[str, str]:
    """{name: recipe path} of every `--arm NAME=RECIPE.yaml`, refused in one line unless NAME is new (not in `taken`,
    the comparison's own arms) and RECIPE an existing YAML file."""
    out: dict[str, str] = {}
    for text in texts or []:
        name, sep, path = text.partition("=")
        if not sep or not name or " " in name or name in (*taken, *out):
            raise ValueError(
                f"`--arm` {text!r} must be NAME=RECIPE.yaml with a new name (no spaces; not one of {list(taken)}, "
                "which the comparison's own recipes give)."
            )
        plain_name(name, "--arm")
        if not (os.path.isfile(path) and path.endswith((".yaml", ".yml"))):
            raise FileNotFoundError(f"`--arm` {name}: {path!r} is not a YAML recipe file.")
        out[name] = path
    return out
