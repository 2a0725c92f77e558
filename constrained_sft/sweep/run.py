"""
`constrained-sft sweep`: search a classification recipe's hyperparameters on a validation split, then (with
`baseline='erm'`) retrain the best configurations with several seeds and compare them on the test split with
confidence intervals. Writes into `sweep_dir`: the study storage, `trials-<arm>.csv`, Optuna's plots, `test/` (the
`eval robustness` report of every retrained model), `comparison.json`, and `report.md` with all of it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import make_url
from transformers import AutoConfig

from ..data import load_tokenizer, load_train_validation, resolve_model_path
from ..models import READOUTS
from ..utils import atomic_path, write_json, write_text
from . import compare
from .search import Arm, Objective, best_params, open_study, run_trial, search, train_model, trial_args
from .space import load_space

OBJECTIVES = ("auc", "ood", "id_with_ood_floor")
STAGES = ("search", "compare", "all")


@dataclass
class SweepArguments:
    space: str = field(default=None, metadata={"help": "The search-space YAML (sections `constrained`, `erm`)."})
    sweep_dir: str | None = field(
        default=None, metadata={"help": "Where the sweep writes (default: <output_dir>-sweep)."}
    )
    n_trials: int = field(default=20, metadata={"help": "Finished (complete or pruned) trials per arm."})
    objective: str = field(
        default="auc",
        metadata={
            "help": "Validation score to maximise: 'auc' (accuracy over the gamma grid), 'ood' (mean accuracy above "
            "the training level) or 'id_with_ood_floor' (ID accuracy among trials whose OOD accuracy >= ood_floor).",
            "choices": list(OBJECTIVES),
        },
    )
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
    pruner: str = field(default="median", metadata={"help": "'median' or 'none'.", "choices": ["median", "none"]})
    storage: str | None = field(
        default=None,
        metadata={"help": "Optuna storage URL (default: sqlite:///<sweep_dir>/study.db); share one to run workers."},
    )
    study_name: str | None = field(default=None, metadata={"help": "Study name prefix (default: sweep folder name)."})
    readouts: list[str] | None = field(
        default=None, metadata={"help": f"Readouts of the constrained arms, of {list(READOUTS)} (default: recipe's)."}
    )
    baseline: str = field(
        default="none", metadata={"help": "'erm': an ERM arm per readout, same trials.", "choices": ["none", "erm"]}
    )
    final_seeds: int = field(default=3, metadata={"help": "Seeds of each best configuration's retraining."})
    stage: str = field(
        default="all",
        metadata={"help": "'search', 'compare' (retrain and test) or 'all'.", "choices": list(STAGES)},
    )
    sampler_seed: int = field(default=0, metadata={"help": "Seed of the TPE sampler."})
    eval_batch_size: int = field(default=64, metadata={"help": "Batch size of validation and test scoring."})
    bootstrap_samples: int = field(default=2000, metadata={"help": "Paired-bootstrap resamples per interval."})

    def validate(self) -> None:
        for name, allowed in (("objective", OBJECTIVES), ("stage", STAGES), ("pruner", ("median", "none"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"`{name}` must be one of {list(allowed)}, got {getattr(self, name)!r}.")
        if self.baseline not in ("none", "erm"):
            raise ValueError(f"`baseline` must be one of ['none', 'erm'], got {self.baseline!r}.")
        if not self.space:
            raise ValueError("`space` is required: a search-space YAML (see recipes/minilm/*/sweep.yaml).")
        if bad := [r for r in self.readouts or [] if r not in READOUTS]:
            raise ValueError(f"`readouts` must be among {list(READOUTS)}, got {bad}.")
        for name in ("n_trials", "evaluations_per_trial", "final_seeds", "eval_batch_size", "bootstrap_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}.")
        v = self.validation_size
        if not (0 < v < 1 or (v >= 1 and float(v).is_integer())):
            raise ValueError(
                f"`validation_size` must be a fraction in (0, 1) or a row count, got {self.validation_size}."
            )
        if self.gammas is not None and (len(self.gammas) < 2 or any(g < 0 for g in self.gammas)):
            raise ValueError(f"`gammas` must be >= 2 levels, each >= 0, got {self.gammas}.")
        if self.stage != "search" and self.baseline != "erm":
            raise ValueError(
                "`stage` 'compare' / 'all' compares with a baseline: pass `--baseline erm` (or --stage search)."
            )

    def locate(self, output_dir: str) -> None:
        """Fills the derived defaults: `sweep_dir` (<output_dir>-sweep), `study_name` (that folder's name) and
        `storage` (a SQLite file in it)."""
        self.sweep_dir = self.sweep_dir or f"{output_dir.rstrip('/')}-sweep"
        self.study_name = self.study_name or os.path.basename(os.path.normpath(self.sweep_dir))
        self.storage = self.storage or f"sqlite:///{os.path.abspath(os.path.join(self.sweep_dir, 'study.db'))}"

    def study(self, arm: str):
        """The Optuna study of one arm (after `locate`), created or loaded."""
        return open_study(f"{self.study_name}-{arm}", self.storage, self.sampler_seed, self.pruner)


@dataclass
class SweepData:
    """Everything a trial needs that does not change between trials: the tokenized splits and the model source."""

    path: str
    config: Any
    tokenizer: Any
    names: list[str]
    train: Any
    held_out: Any  # the validation split
    dtype: Any
    architecture: str = "pretrained"  # `classifier_architecture`
    ut_layers: int = 3


def training_gamma(training_args) -> float:
    """The training noise level, the ID / OOD boundary (the top of a gamma range)."""
    noise = training_args.noise_gamma
    return float(max(noise) if isinstance(noise, list) else noise or 0.0)


def sweep_data(settings: SweepArguments, script_args, model_args) -> SweepData:
    """The model source and the tokenized train / validation splits (the test split untouched)."""
    path = resolve_model_path(model_args.model_name_or_path)
    config = AutoConfig.from_pretrained(path, revision=model_args.model_revision)
    tokenizer = load_tokenizer(path, model_args.model_revision)
    train, validation, names = load_train_validation(script_args, tokenizer, None, settings.validation_size)
    return SweepData(
        path,
        config,
        tokenizer,
        names,
        train,
        validation,
        model_args.dtype,
        script_args.classifier_architecture,
        script_args.ut_layers,
    )


def arms_of(settings: SweepArguments, recipe_readout: str) -> list[Arm]:
    readouts = settings.readouts or [recipe_readout]
    arms = [Arm(f"constrained-{r}", r, True) for r in readouts]
    if settings.baseline == "erm":
        arms += [Arm(f"erm-{r}", r, False) for r in readouts]
    return arms


def run(settings: SweepArguments, script_args, model_args, training_args) -> dict[str, Any]:
    settings.validate()
    if training_args.constraints == "none":
        raise ValueError("The recipe has `constraints: none`; sweep the constrained recipe (its ERM twin is an arm).")
    spaces = load_space(settings.space)  # read before anything is written
    settings.locate(training_args.output_dir)
    train_gamma = training_gamma(training_args)
    settings.gammas = sorted(settings.gammas or [round(k * (train_gamma or 0.5), 6) for k in range(5)])
    objective = Objective(settings.objective, settings.gammas, train_gamma, settings.ood_floor)
    data = sweep_data(settings, script_args, model_args)
    base = dataclasses.replace(training_args, per_device_eval_batch_size=settings.eval_batch_size)
    arms = arms_of(settings, script_args.classifier_readout)
    pooling = script_args.classifier_pooling

    studies = {arm.name: settings.study(arm.name) for arm in arms}
    if settings.stage in ("search", "all"):
        for arm in arms:
            space = spaces["constrained" if arm.constrained else "erm"]
            search(
                studies[arm.name],
                settings.n_trials,
                lambda trial, arm=arm, space=space: run_trial(
                    trial, data, arm, space, base, objective, settings, pooling
                ),
                desc=f"sweep {arm.name}",
            )
    shown = make_url(settings.storage).render_as_string(hide_password=True)  # reports never carry a database password
    out: dict[str, Any] = {"settings": {**dataclasses.asdict(settings), "storage": shown}, "arms": {}}
    for arm in arms:
        out["arms"][arm.name] = trials_summary(studies[arm.name], arm, settings.sweep_dir)
    if settings.stage in ("compare", "all"):
        for arm in arms:
            retrain(arm, best_params(studies[arm.name]), settings, data, base, pooling)
        results = compare.evaluate_finals([a.name for a in arms], settings, train_gamma, script_args)
        pairs = [(f"constrained-{r}", f"erm-{r}") for r in settings.readouts or [script_args.classifier_readout]]
        out["comparison"] = compare.compare_arms(results, pairs, settings.final_seeds, settings.bootstrap_samples)
        out["test_report"] = results["files"]
        out["arm_plot"] = compare.plot_arms(
            results,
            [a.name for a in arms],
            settings.final_seeds,
            os.path.join(settings.sweep_dir, "test_accuracy.png"),
        )
        write_json(os.path.join(settings.sweep_dir, "comparison.json"), out)
    write_report(out, settings.sweep_dir)
    return out


def retrain(arm: Arm, params: dict[str, Any], settings: SweepArguments, data: SweepData, base, pooling: str) -> None:
    """The arm's best configuration with seeds 0..S-1 (a seed the search chose is replaced), each saved; a seed
    whose model is already saved is kept, so a killed comparison resumes."""
    for seed in range(settings.final_seeds):
        folder = compare.seed_dir(settings.sweep_dir, arm.name, seed)
        if os.path.isfile(os.path.join(folder, compare.DONE)):
            continue
        trainer = train_model(data, arm, trial_args(base, arm, {**params, "seed": seed}, folder), pooling)
        trainer.train()
        trainer.save_model(folder)


def trials_summary(study, arm: Arm, sweep_dir: str) -> dict[str, Any]:
    """Trials as rows (also `trials-<arm>.csv`), the best trial, and Optuna's history / importance plots."""
    import csv

    rows = []
    for t in study.get_trials(deepcopy=False):
        rows.append({"trial": t.number, "state": t.state.name, "value": t.value, **t.params, **t.user_attrs})
    keys = list(dict.fromkeys(k for r in rows for k in r))
    os.makedirs(sweep_dir, exist_ok=True)
    with atomic_path(os.path.join(sweep_dir, f"trials-{arm.name}.csv")) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    complete = [r for r in rows if r["state"] == "COMPLETE"]
    best = max(complete, key=lambda r: r["value"]) if complete else None
    return {"trials": rows, "best": best, "plots": optuna_plots(study, arm.name, sweep_dir)}


def optuna_plots(study, arm: str, sweep_dir: str) -> dict[str, str]:
    """Optuna's optimisation history and parameter importances as PNGs; importances need >= 2 complete trials."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    files = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
        for kind, plot in (("history", ovm.plot_optimization_history), ("importances", ovm.plot_param_importances)):
            try:
                ax = plot(study)
            except (ValueError, RuntimeError):  # too few complete trials, or a single searched value
                continue
            fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            path = os.path.join(sweep_dir, f"{kind}-{arm}.png")
            fig.set_size_inches(7, 4)
            fig.tight_layout()
            with atomic_path(path) as tmp:
                fig.savefig(tmp, dpi=110, format="png")
            plt.close(fig)
            files[kind] = path
    return files


def write_report(out: dict[str, Any], sweep_dir: str) -> str:
    """`report.md`: each arm's trials and best configuration, the plots, and the comparison with intervals."""
    lines = [
        "# Sweep report",
        "",
        f"Settings: `{json.dumps({k: v for k, v in out['settings'].items() if v is not None})}`",
        "",
    ]
    for arm, info in out["arms"].items():
        lines += [f"## {arm}", "", trial_table(info["trials"]), ""]
        if info["best"]:
            lines += [f"Best trial {info['best']['trial']}: value {info['best']['value']:.4f}", ""]
        lines += [f"![{kind}]({os.path.basename(p)})" for kind, p in info["plots"].items()] + [""]
    if "comparison" in out:
        lines += ["## Test split: constrained - ERM (paired bootstrap, 95%)", "", compare.table(out["comparison"]), ""]
        lines += [f"![accuracy vs gamma]({os.path.basename(out['arm_plot'])})", ""]
    path = os.path.join(sweep_dir, "report.md")
    write_text(path, "\n".join(lines))
    return path


def trial_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no trials)"
    keys = list(dict.fromkeys(k for r in rows for k in r))

    def cell(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else "" if v is None else str(v)

    head = "| " + " | ".join(keys) + " |"
    return "\n".join(
        [head, "|" + "---|" * len(keys)] + ["| " + " | ".join(cell(r.get(k)) for k in keys) + " |" for r in rows]
    )
