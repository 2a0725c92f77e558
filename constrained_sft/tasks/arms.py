"""
Arms of a comparison given as recipes (`study --arm`, `sweep --arm`): `NAME=RECIPE.yaml` parsed and checked, the twin
check (what two recipes of one comparison may and may not differ in), and `RunKey`, one arm trained with one seed.
"""

from __future__ import annotations

import dataclasses
import os
import re

from ..config import ConstraintArguments, NoiseArguments
from ..trainers.resume import deciding
from ..utils.folders import child_path, plain_name
from .base import Recipe


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
    fields (`trainers.resume.deciding`: all but paths, logging and speed), data fields and model. A study or a sweep
    continues a folder only with the same, so no run of one recipe is mixed with runs of a changed one."""
    training = {k: v for k, v in deciding(recipe.training.to_dict()).items() if k != "seed"}
    model = dataclasses.asdict(recipe.model) if recipe.model is not None else None
    return {"training": training, "data": dataclasses.asdict(recipe.script), "model": model}


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
