"""The sweep's own options (`constrained-sft sweep --help`), beside the recipe's fields."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias, get_args

from ..comparison import ERM, arm_recipes, comparison_levels, recipe_identity
from ..comparison.names import ErmName
from ..noise import NoiseGrid
from ..utils.fields import check_fields
from ..utils.output_folders import check_output_folder
from ..utils.redact import redact_url
from ..utils.types import JSONObject
from .objectives import SWEEP_OBJECTIVES, objectives_help
from .search import Objective, open_study

if TYPE_CHECKING:
    from optuna import Study

    from ..tasks import AnyRecipe
    from .space import SearchSpace

Stage: TypeAlias = Literal["search", "compare", "all"]
STAGES: tuple[Stage, ...] = get_args(Stage)
Baseline: TypeAlias = Literal["none", ErmName]  # `baseline`: none, or an ERM twin of each constrained arm
BASELINES: tuple[Baseline, ...] = get_args(Baseline)
Pruner: TypeAlias = Literal["median", "none"]


@dataclass
class SweepArguments:
    space: str | None = field(
        default=None, metadata={"help": "The search-space YAML (sections `constrained`, `erm`)."}
    )
    sweep_dir: str | None = field(
        default=None, metadata={"help": "Where the sweep writes (default: <output_dir>-sweep)."}
    )
    n_trials: int = field(default=20, metadata={"help": "Finished (complete or pruned) trials per arm."})
    # the registry itself as the choices: an objective registered after this module is imported is one too
    objective: str = field(default="auc", metadata={"help": objectives_help(), "choices": SWEEP_OBJECTIVES})
    ood_floor: float = field(default=0.0, metadata={"help": "OOD accuracy floor of 'id_with_ood_floor'."})
    validation_size: float = field(
        default=0.15, metadata={"help": "Validation rows carved off the training split: a fraction or a count."}
    )
    gammas: list[float] | None = field(
        default=None, metadata={"help": "Noise grid of the objective and the test (default: 0..4x training gamma)."}
    )
    evaluations_per_trial: int = field(
        default=2, metadata={"help": "Validation scores per trial reported to the pruner (the last is the final)."}
    )
    pruner: Pruner = field(default="median", metadata={"help": "'median' or 'none'."})
    storage: str | None = field(
        default=None,
        metadata={"help": "Optuna storage URL (default: sqlite:///<sweep_dir>/study.db); share one to run workers."},
    )
    study_name: str | None = field(default=None, metadata={"help": "Study name prefix (default: sweep folder name)."})
    readouts: list[str] | None = field(
        default=None,
        metadata={
            "help": "Classification: readouts of the constrained arms, of ['head', 'linear'] (default: recipe's)."
        },
    )
    baseline: Baseline = field(default="none", metadata={"help": f"'{ERM}': an ERM arm per readout, same trials."})
    final_seeds: int = field(default=3, metadata={"help": "Seeds of each best configuration's retraining."})
    stage: Stage = field(default="all", metadata={"help": "'search', 'compare' (retrain and test) or 'all'."})
    sampler_seed: int = field(
        default=0,
        metadata={
            "help": "Seed of the TPE sampler: trial n draws from a seed made of this one and n (the storage numbers "
            "the trials), so workers sharing a study never draw alike and a rerun draws the same."
        },
    )
    eval_batch_size: int = field(default=64, metadata={"help": "Batch size of validation and test scoring."})
    bootstrap_samples: int = field(default=2000, metadata={"help": "Paired-bootstrap resamples per interval."})
    arm: list[str] | None = field(
        default=None,
        metadata={
            "help": "More arms, repeatable: NAME=RECIPE.yaml, a recipe with the same data and model (e.g. --arm "
            "penalty=recipes/.../penalty.yaml), searched in the space's `NAME` section if it has one (else its "
            "`constrained` or `erm` section, by the recipe's `constraints`), retrained and compared with --reference; "
            "the command line's recipe overrides reach every arm.",
            "action": "extend",
        },
    )
    reference: str | None = field(
        default=None,
        metadata={
            "help": "The arm each --arm is compared with, A - reference (default: the ERM twin, else the last arm)."
        },
    )
    heartbeat_interval: int = field(
        default=10,
        metadata={
            "help": "Seconds between a running trial's heartbeats in the storage; a trial whose worker stopped beating "
            "for 3x this long is marked failed and its place in the study freed."
        },
    )

    workers: int = field(
        default=1,
        metadata={
            "help": "With --launcher slurm: search workers submitted as Slurm jobs, all against --storage (a "
            "PostgreSQL URL every node reaches)."
        },
    )

    def __post_init__(self) -> None:
        check_fields(self)
        check_output_folder(self.sweep_dir, "--sweep_dir")

    def validate(self) -> str:
        """Every option checked before any work; returns `space`, which has no default."""
        if self.objective not in SWEEP_OBJECTIVES:
            raise ValueError(f"`objective` must be one of {list(SWEEP_OBJECTIVES)}, got {self.objective!r}.")
        if not self.space:
            raise ValueError("`space` is required: a search-space YAML (see recipes/*/*/sweep.yaml).")
        names = ("n_trials", "evaluations_per_trial", "final_seeds", "eval_batch_size", "bootstrap_samples")
        for name in (*names, "heartbeat_interval", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}.")
        v = self.validation_size
        if not (0 < v < 1 or (v >= 1 and float(v).is_integer())):
            raise ValueError(
                f"`validation_size` must be a fraction in (0, 1) or a row count, got {self.validation_size}."
            )
        if self.gammas is not None and (len(NoiseGrid.parse(self.gammas, "gammas")) < 2):
            raise ValueError(f"`gammas` must be >= 2 levels, each >= 0, got {self.gammas}.")
        if self.stage != "search" and self.baseline != ERM:
            raise ValueError(
                "`stage` 'compare' / 'all' compares with a baseline: pass `--baseline erm` (or --stage search)."
            )
        return self.space

    def plan(self, output_dir: str, noise_gamma: object) -> SweepPlan:
        """The options checked (`validate`) and resolved once, for the recipe's `output_dir` and `noise_gamma`:
        `sweep_dir` (<output_dir>-sweep), `study_name` (that folder's name), `storage` (a SQLite file in it) and the
        noise grid (`comparison.comparison_levels`: 0 to 4x the training level). The caller's options are left as
        given."""
        space = self.validate()
        sweep_dir = self.sweep_dir or f"{output_dir.rstrip('/')}-sweep"
        study_name = self.study_name or os.path.basename(os.path.normpath(sweep_dir))
        storage = self.storage or f"sqlite:///{os.path.abspath(os.path.join(sweep_dir, 'study.db'))}"
        gammas = comparison_levels(self.gammas, noise_gamma, "gammas")
        options = dataclasses.replace(self, sweep_dir=sweep_dir, study_name=study_name, storage=storage, gammas=gammas)
        return SweepPlan(options, space, sweep_dir, study_name, storage, gammas)

    def extra_arms(self) -> dict[str, str]:
        """{name: recipe path} of every `--arm` (`comparison.arm_recipes`; the twins' names are taken)."""
        return arm_recipes(self.arm)

    def folder_settings(
        self, recipes: Mapping[str, AnyRecipe], spaces: Mapping[str, SearchSpace], given_storage: str | None
    ) -> JSONObject:
        """What decides a sweep's results, for its folder (`utils.output_folders`): the options (a continuation may
        raise `n_trials` and `final_seeds`), every arm's recipe (`recipes`: {name: Recipe}; the ERM twins train the
        constrained recipe), the search space and a storage the user named (the default one lives in the folder)."""
        skip = ("sweep_dir", "n_trials", "final_seeds", "stage", "storage", "heartbeat_interval", "bootstrap_samples",
                "workers")  # fmt: skip
        settings = {k: v for k, v in dataclasses.asdict(self).items() if k not in (*skip, "arm")}
        settings["arms"] = {name: recipe_identity(recipe) for name, recipe in recipes.items()}
        settings["space"] = {name: [dataclasses.asdict(p) for p in space.params] for name, space in spaces.items()}
        if given_storage:
            settings["storage"] = redact_url(given_storage)
        return settings


@dataclass(frozen=True)
class SweepPlan:
    """A sweep's settings resolved once, before any work (`SweepArguments.plan`), as TRL's scripts turn their
    dataclasses into arguments once: every step reads these, none is unset and none is filled again."""

    options: SweepArguments  # as given, the derived values below filled in (what the sweep's report records)
    space: str
    sweep_dir: str
    study_name: str
    storage: str
    gammas: list[float]  # the objective's and the test's noise levels, sorted

    def study(self, arm: str, objective: Objective) -> Study:
        """The Optuna study of one arm, created or loaded."""
        o = self.options
        return open_study(
            f"{self.study_name}-{arm}", self.storage, o.sampler_seed, o.pruner, objective, o.heartbeat_interval
        )
