"""
The arms of a comparison from its recipes: the study's (the constrained recipe, its ERM twin and any `--arm`) and the
sweep's (a constrained arm per readout, their ERM twins, any `--arm`); the one twin check (what two recipes of one
comparison may and may not differ in); the reference arm; `--arm NAME=RECIPE.yaml` parsed and checked; and `RunKey`,
one arm trained with one seed.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence

from ..config import ConstraintArguments, NoiseArguments
from ..constraints import mode_of
from ..tasks import AnyRecipe, Arm, Task
from ..tasks.training import data_identity
from ..trainers.resume import deciding
from ..utils.output_folders import child_path, plain_name
from ..utils.types import JSONObject
from .names import CONSTRAINED, ERM, TWINS, clash, readout_arm


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


TWIN_FLAGS = "--config and --erm_config"  # how a refusal names the study's twins
BOOKKEEPING = {"output_dir", "logging_dir", "run_name", "seed", "model_init_kwargs", "resume_from_checkpoint"}


def twin_differences(
    constrained: AnyRecipe, other: AnyRecipe, same_noise: bool = True, who: str = TWIN_FLAGS
) -> list[str]:
    """Training fields (not constraints, noise or bookkeeping) on which two arms differ; data, model or (with
    `same_noise`) noise differences are refused, naming the recipes as `who` says: the arms would not see the same
    data, start or perturbation. An arm of its own (`--arm`) may train with other noise (NEFTune's, say): its noise
    fields are listed instead."""
    refused = []
    for label, a, b in (("data", constrained.script, other.script), ("model", constrained.model, other.model)):
        da, db = ({} if x is None else dataclasses.asdict(x) for x in (a, b))  # a recipe may have no model fields
        refused += [f"{label} field `{k}` ({da[k]!r} vs {db[k]!r})" for k in da if k != "task" and da[k] != db.get(k)]
    noise = {f.name for f in dataclasses.fields(NoiseArguments)}
    constraint = {f.name for f in dataclasses.fields(ConstraintArguments)}
    # the configs' fields: `vars` also holds what TrainingArguments sets up (its `distributed_state`, a new object each)
    ta, tb = (
        {f.name: getattr(t, f.name) for f in dataclasses.fields(t)} for t in (constrained.training, other.training)
    )
    if same_noise:
        refused += [f"`{k}` ({ta[k]!r} vs {tb[k]!r})" for k in sorted(noise) if ta[k] != tb[k]]
    if refused:
        same = (
            "same data, model and noise; they differ in constraints"
            if same_noise
            else "same data, model; an arm's own constraints and noise may differ"
        )
        raise ValueError(f"{who} must be twins ({same}): they differ in {'; '.join(refused)}.")
    skip = (noise if same_noise else set()) | constraint | BOOKKEEPING
    return [
        f"{k}: {ta[k]!r} vs {tb[k]!r}"
        for k in sorted(ta)
        if k not in skip and not k.startswith("_") and ta[k] != tb[k]
    ]


def more_differences(constrained: AnyRecipe, more: dict[str, AnyRecipe]) -> list[str]:
    """The one check of every `--arm` (study and sweep): the same data and model as the constrained recipe, its own
    objective, constraints and noise; refused in one line naming the arm, else its differing fields ('arm: field')."""
    out = []
    for name, recipe in more.items():
        out += [
            f"{name}: {d}" for d in twin_differences(constrained, recipe, False, f"`--arm {name}`: it and --config")
        ]
    return out


def study_arms(
    constrained: AnyRecipe, erm: AnyRecipe, more: dict[str, AnyRecipe]
) -> tuple[dict[str, AnyRecipe], list[str]]:
    """The study's arms, {name: recipe} (the constrained recipe, its ERM twin, then the `--arm`s), and every
    training field on which an arm differs from the constrained one; refused unless `--config` is constrained,
    `--erm_config` is not, the two are twins and every `--arm` passes `more_differences`."""
    if not mode_of(constrained.training.constraints).trains_layers:
        raise ValueError(
            "--config has `constraints: none`; give the constrained recipe (its ERM twin is --erm_config)."
        )
    if mode_of(erm.training.constraints).trains_layers:
        raise ValueError(
            f"--erm_config has `constraints: {erm.training.constraints}`; the ERM twin needs `constraints: none`."
        )
    differences = twin_differences(constrained, erm) + more_differences(constrained, more)
    return {CONSTRAINED: constrained, ERM: erm, **more}, differences


def sweep_arms(
    task: Task, recipe: AnyRecipe, readouts: list[str] | None, baseline: bool, more: dict[str, AnyRecipe]
) -> list[Arm]:
    """The sweep's arms: a constrained arm per readout (or one), with `baseline` an ERM twin of each, then the
    `--arm`s (searched from their own recipes); refused unless the recipe is constrained, the readouts are the task's
    and every `--arm` has a new name and passes `more_differences`."""
    if readouts and not task.readouts:
        raise ValueError(
            f"`readouts` chooses among a classifier's readouts; `task: {task.name}` recipes have one readout."
        )
    if bad := [r for r in readouts or [] if r not in task.readouts]:
        raise ValueError(f"`readouts` must be among {list(task.readouts)}, got {bad}.")
    chosen: list[str | None] = [*readouts] if readouts else [task.searching.recipe_readout(recipe)]
    arms = [Arm(readout_arm(True, r), r, True) for r in chosen]
    arms += [Arm(readout_arm(False, r), r, False) for r in chosen] if baseline else []
    if not mode_of(recipe.training.constraints).trains_layers:
        raise ValueError("The recipe has `constraints: none`; sweep the constrained recipe (its ERM twin is an arm).")
    if clash := [name for name in more if name in [a.name for a in arms]]:
        raise ValueError(f"`--arm` {clash[0]!r}: the sweep already has an arm of that name; choose another.")
    more_differences(recipe, more)
    return arms + [Arm(n, None, mode_of(r.training.constraints).trains_layers, r.training) for n, r in more.items()]


def reference_arm(given: str | None, names: list[str], twins_only: bool = False) -> str:
    """The arm every other arm is compared with, the one default of the study, the sweep and the eval commands:
    `given`, else ERM where the comparison has it, else the last arm (`eval robustness --models A B` reads A - B);
    refused unless one of `names`. A sweep without `--arm` compares each constrained arm with its
    own ERM twin (`twins_only`), so a `--reference` there is refused."""
    if given is not None and twins_only:
        raise ValueError(
            f"`--reference` {given!r} names the arm each `--arm` is compared with, and this sweep has no `--arm`: its "
            "constrained arms are compared with their ERM twins. Drop `--reference` or add an `--arm`."
        )
    reference = given or (ERM if ERM in names else names[-1])
    if reference not in names:
        raise ValueError(f"`--reference` {given!r} must be one of the arms {names}.")
    return reference


def compared_pairs(
    arms: Sequence[str], reference: str, twins: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """
    The one pairing rule of every comparison (study, sweep, the eval commands), as (arm, what it is compared with), A -
    B: each arm `twins` maps (a sweep's constrained arm of a readout) against its ERM twin, and every other arm but the
    reference and those twins against `reference` (`reference_arm`).
    """
    twins = twins or {}
    paired = {reference, *twins.values()}
    return [(arm, twins[arm]) for arm in arms if arm in twins] + [
        (arm, reference) for arm in arms if arm not in twins and arm not in paired
    ]


def recipe_identity(recipe: AnyRecipe) -> JSONObject:
    """What decides an arm's trained weights, but for the seed (the runs of one arm differ in it): its training
    fields (`trainers.resume.deciding`: all but paths, logging and speed), data fields with what a local source holds
    (`training.data_identity`: its content id) and model. A study or a sweep continues a folder only with the same, so
    no run of one recipe is mixed with runs of a changed one, or with runs of the same file before an edit."""
    settings = recipe.training.to_dict()  # type: ignore[no-untyped-call]  # transformers leaves it untyped
    training = {k: v for k, v in deciding(settings).items() if k != "seed"}
    model = dataclasses.asdict(recipe.model) if recipe.model is not None else None
    return {"training": training, "data": data_identity(recipe.script), "model": model}


def arm_recipes(texts: list[str] | None, taken: tuple[str, ...] = TWINS) -> dict[str, str]:
    """{name: recipe path} of every `--arm NAME=RECIPE.yaml`, refused in one line unless NAME is new (not in `taken`,
    the comparison's own arms) and RECIPE an existing YAML file."""
    out: dict[str, str] = {}
    for text in texts or []:
        name, sep, path = text.partition("=")
        if not sep or not name or " " in name or clash(name, (*taken, *out)):
            raise ValueError(
                f"`--arm` {text!r} must be NAME=RECIPE.yaml with a new name (no spaces; not one of {list(taken)}, "
                "which the comparison's own recipes give, nor another arm's, regardless of case)."
            )
        plain_name(name, "--arm")
        if not (os.path.isfile(path) and path.endswith((".yaml", ".yml"))):
            raise FileNotFoundError(f"`--arm` {name}: {path!r} is not a YAML recipe file.")
        out[name] = path
    return out
