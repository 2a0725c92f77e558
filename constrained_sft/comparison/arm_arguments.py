"""
Which saved models an evaluation compares (`ArmArguments`): `--models` (each its own arm) or `--arm NAME=DIR[,DIR...]`
(one model per training seed), and the reference arm every other arm is compared with, by the one rule of the study and
the sweep (`arms.reference_arm`, `arms.compared_pairs`). Fields of `eval robustness` and `eval harness`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..data import ModelPathError
from ..data.models import hub_id_unavailable
from ..utils.output_folders import plain_name
from .arms import compared_pairs, reference_arm
from .names import clash


@dataclass
class ArmArguments:
    """The models of a comparison, as arms (fields of the evaluation commands that compare models)."""

    models: list[str] | None = field(
        default=None, metadata={"help": "Model folders, Hub ids, `pkg:` aliases or LoRA adapter folders."}
    )
    names: list[str] | None = field(
        default=None, metadata={"help": "A display name per model of --models (default: folder names)."}
    )
    arm: list[str] | None = field(
        default=None,
        metadata={
            "help": "An arm of the comparison, repeatable: NAME=DIR[,DIR...], one model per training seed (seeds "
            "are paired by position across arms), e.g. --arm constrained=c0,c1 --arm erm=e0,e1. Instead of --models.",
            "action": "extend",
        },
    )
    reference: str | None = field(
        default=None,
        metadata={
            "help": "The arm every other arm is compared with, A - reference (default: the arm named `erm` where there "
            "is one, else the last arm; the study's and the sweep's rule too)."
        },
    )

    def validate_selection(self, arms: dict[str, list[tuple[str, str]]] | None = None) -> None:
        """Exactly one way of naming the models; `arms`: models given by the caller instead of --models / --arm."""
        given = (arms is not None) + bool(self.models) + bool(self.arm)
        if given != 1:
            raise ValueError(
                "Give the models to evaluate with `--models DIR [DIR ...]` or with `--arm NAME=DIR[,DIR...]` (one per "
                f"arm): {'not both' if given else 'one of them is required'}."
            )
        if self.names is not None and (self.arm or len(self.names) != len(self.models or [])):
            raise ValueError(
                f"`--names` has {len(self.names)} names for {len(self.models or [])} models; give one name per model "
                "of `--models` (an `--arm` names itself)."
            )

    def check_paths(self, arms: dict[str, list[tuple[str, str]]]) -> None:
        """The reference is an arm and every model path exists (or is a Hub id or a pkg: alias)."""
        if self.reference is not None and self.reference not in arms:
            raise ValueError(f"`--reference` {self.reference!r} is not an arm; allowed: {list(arms)}.")
        check_model_paths([p for members in arms.values() for _, p in members], "--arm" if self.arm else "--models")

    def arms(self) -> dict[str, list[tuple[str, str]]]:
        """{arm: [(model name, path), ...]}: each `--arm`, or each model of `--models` as an arm of its own. Every
        name is a plain name (`utils.plain_name`): results are filed under them."""
        if self.models:
            for name in self.names or []:
                plain_name(name, "--names")
            names = self.names or [folder_name(p) for p in self.models]
            if len({n.casefold() for n in names}) != len(names):
                raise ValueError(
                    f"`--names` must be unique regardless of case (one per model), got {names}; pass distinct `--names`."
                )
            return {n: [(n, p)] for n, p in zip(names, self.models, strict=True)}
        arms: dict[str, list[tuple[str, str]]] = {}
        for text in self.arm or []:
            name, sep, paths = text.partition("=")
            folders = [p for p in paths.split(",") if p]
            if not sep or not name or not folders or " - " in name:
                raise ValueError(
                    f"`--arm` {text!r} must be NAME=DIR[,DIR...] (a plain name without ' - ', then one model folder "
                    "per training seed, comma-separated)."
                )
            plain_name(name, "--arm")
            if taken := clash(name, list(arms)):
                raise ValueError(
                    f"`--arm` {name!r} is given twice ({taken!r}: names are compared regardless of case); give each "
                    "arm once with all its folders."
                )
            if len(folders) == 1:
                arms[name] = [(name, folders[0])]
                continue
            leaves = [folder_name(p) for p in folders]
            unique = len(set(leaves)) == len(leaves)
            arms[name] = [
                (f"{name}/{leaf if unique else i}", p) for i, (leaf, p) in enumerate(zip(leaves, folders, strict=True))
            ]
        return arms

    def pairs(self, arms: list[str]) -> list[tuple[str, str]]:
        """(arm, reference) for every other arm of `arms` (`arms.compared_pairs`)."""
        return compared_pairs(arms, reference_arm(self.reference, arms))


def folder_name(path: str, flag: str = "--names") -> str:
    """A model's default name: its folder's name (of the absolute path, so '.' or '..' name the real folder), or the
    Hub id's last part; refused, asking for `flag`, when that is no plain name (a hidden folder)."""
    leaf = os.path.basename(os.path.normpath(os.path.abspath(path) if os.path.exists(path) else path))
    try:
        return plain_name(leaf, flag)
    except ValueError:
        raise ValueError(
            f"the folder name of {path!r} is not a plain name to file its results under; pass `{flag}`."
        ) from None


def check_model_paths(paths: list[str], flag: str) -> None:
    """Every model of a command exists (or is a Hub id or a pkg: alias), checked before the first is loaded."""
    for path in paths:
        if not path.startswith("pkg:") and path.count("/") != 1 and not os.path.exists(path):
            raise ModelPathError(
                f"`{flag}` {path!r} does not exist; allowed: a local model folder, a Hub id or a pkg: alias."
            )
        if why := hub_id_unavailable(path):
            raise ModelPathError(f"`{flag}` {path!r} is a Hub id that cannot load: {why}; give a local model folder.")
