"""The fields of `constrained-sft eval harness`, checked before any model loads."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ...comparison.arm_arguments import ArmArguments
from ...noise import NoiseGrid
from ...utils.fields import check_fields
from ...utils.output_folders import check_output_folder


@dataclass
class HarnessArguments(ArmArguments):
    """lm-evaluation-harness tasks at each noise level, per model; arms compared with paired intervals."""

    tasks: list[str] | None = field(
        default=None,
        metadata={
            "help": "lm-eval task names (e.g. ifeval mmlu hellaswag; with --include_path, your own YAML tasks; "
            "`offline` = the tasks this library ships, which read local files)."
        },
    )
    output_dir: str | None = field(
        default=None, metadata={"help": "Where the per-cell results, results.json and report.md go (resumable)."}
    )
    gammas: list[float] = field(
        default_factory=lambda: [0.0, 0.5, 1.0], metadata={"help": "Noise levels gamma (>= 0; 0 = clean)."}
    )
    noise_seeds: int = field(default=1, metadata={"help": "Noise seeds per level and model (>= 1)."})
    noise_mean: float = field(default=0.0, metadata={"help": "Mean of the noise."})
    sigma_x: float | None = field(
        default=None,
        metadata={
            "help": "sigma_x for every model (default: `noise_sigma_x` in the first model's constraints.json, else "
            "measured on the first model, as `eval robustness` does)."
        },
    )
    include_path: str | None = field(
        default=None, metadata={"help": "lm-eval's --include_path: a folder of your own task YAML files."}
    )
    limit: int | None = field(default=None, metadata={"help": "lm-eval's --limit: the first N documents per task."})
    num_fewshot: int | None = field(default=None, metadata={"help": "lm-eval's --num_fewshot (default: the task's)."})
    batch_size: int = field(default=8, metadata={"help": "lm-eval's --batch_size."})
    max_gen_toks: int | None = field(
        default=None, metadata={"help": "Longest generated answer of generate_until tasks (default: the task's)."}
    )
    apply_chat_template: bool = field(
        default=False, metadata={"help": "lm-eval's --apply_chat_template: prompts in the model's chat format."}
    )
    dtype: Literal["float32", "bfloat16", "auto"] = field(
        default="float32",
        metadata={
            "help": "Weights' dtype: 'float32' (exact on a CPU), 'bfloat16' (a GPU's choice for large models) or "
            "'auto' (as saved)."
        },
    )
    bootstrap_samples: int = field(default=2000, metadata={"help": "Paired-bootstrap resamples per interval."})

    def __post_init__(self) -> None:
        check_fields(self)
        check_output_folder(self.output_dir, "--output_dir")

    def validate(self) -> str:
        """Every field checked before any model loads: the models, the numbers, the tasks lm-eval knows. Returns
        `--output_dir`, which has no default."""
        self.validate_selection()
        if not self.output_dir:
            raise ValueError("`--output_dir` is required.")
        if not self.tasks:
            raise ValueError("`--tasks` is required: lm-eval task names, or `offline` for the tasks shipped here.")
        NoiseGrid.parse(self.gammas, "--gammas")
        if self.sigma_x is not None and not (math.isfinite(self.sigma_x) and self.sigma_x > 0):
            raise ValueError(f"`--sigma_x` must be a finite number > 0, got {self.sigma_x}.")
        for name in ("noise_seeds", "batch_size", "bootstrap_samples", "limit", "max_gen_toks"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"`--{name}` must be >= 1, got {value}.")
        if self.num_fewshot is not None and self.num_fewshot < 0:
            raise ValueError(f"`--num_fewshot` must be >= 0, got {self.num_fewshot}.")
        if self.include_path is not None and not os.path.isdir(self.include_path):
            raise ValueError(f"`--include_path` {self.include_path!r} is not a folder of task YAML files.")
        manager = self.task_manager()
        known = manager.all_tasks
        for task in self.task_names():
            if task not in known:
                close = difflib.get_close_matches(task, known, n=5)
                hint = f"; close: {close}" if close else "; `lm_eval ls tasks` lists them"
                skipped = broken_task_files(self.include_path) if self.include_path else []
                if skipped:
                    hint = (
                        f"; lm-eval skipped YAML files of --include_path that do not parse: {'; '.join(skipped[:3])}"
                    )
                raise ValueError(f"`--tasks` {task!r} is not an lm-eval task{hint}.")
            entry = manager.task_index[task]
            if entry.kind.name == "TASK" and not (entry.cfg.get("dataset_path") or entry.cfg.get("custom_dataset")):
                raise ValueError(
                    f"`--tasks` {task!r} ({entry.yaml_path}) names no dataset: its YAML needs `dataset_path` (a Hub or "
                    "local dataset) or `custom_dataset`, or lm-eval cannot load its documents."
                )
        self.check_paths(self.arms())
        return self.output_dir

    def task_versions(self, manager) -> dict[str, str]:
        """{task: 'v<metadata version>:<hash of its YAML file>'}: a harness cell is reused only for the same task
        definition (an edited YAML, or another lm-eval release's, is another task)."""
        out = {}
        for task in self.task_names():
            entry = manager.task_index[task]
            with open(entry.yaml_path, "rb") as f:
                content = hashlib.sha256(f.read()).hexdigest()[:12]
            out[task] = f"v{(entry.cfg.get('metadata') or {}).get('version')}:{content}"
        return out

    def folder_settings(self) -> dict:
        """What decides every cell beyond its model, task, level and seed (which key the cells themselves): a harness
        folder continues only with the same. The models, tasks, levels and noise seeds may grow."""
        grow = (
            "output_dir",
            "models",
            "names",
            "arm",
            "reference",
            "tasks",
            "gammas",
            "noise_seeds",
            "bootstrap_samples",
        )
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in grow}

    def task_names(self) -> list[str]:
        """`--tasks` with `offline` expanded to the shipped offline tasks."""
        from .offline import OFFLINE_TASKS

        names: list[str] = []
        for task in self.tasks or []:
            names += OFFLINE_TASKS if task == "offline" else [task]
        return names

    def task_manager(self):
        """lm-eval's TaskManager for `--tasks`, built once for these arguments (which `validate` settles): over the
        shipped offline tasks and `--include_path` alone when they define every task asked for as a task, else over
        lm-eval's own tasks too. Indexing lm-eval's ~14,700 task YAML files takes 5-10 s on 2 cores; a group or tag
        may name lm-eval's tasks, so only plain tasks skip it. Either way a later path overrides an earlier one, so a
        name resolves to the same file."""
        return self._task_manager

    @functools.cached_property
    def _task_manager(self):
        from lm_eval.tasks import TaskManager

        from .offline import task_folder

        paths = [task_folder()] + ([self.include_path] if self.include_path else [])
        local = TaskManager(include_path=paths, include_defaults=False)
        if set(self.task_names()) <= set(local.all_subtasks):
            return local
        return TaskManager(include_path=paths)


def broken_task_files(folder: str) -> list[str]:
    """'file:line:column: problem' for each task YAML under `folder` that does not parse: lm-eval's index skips such
    files without a word, so the task they define is only 'unknown'. Tags (`!function`) are read as plain values."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    out = []
    for path in sorted(Path(folder).glob("**/*.yaml")):
        try:
            yaml.load(path.read_text(encoding="utf-8", errors="replace"), Loader=Loader)  # noqa: S506 - SafeLoader
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
            out.append(f"{path}{where}: {getattr(error, 'problem', None) or 'not valid YAML'}")
    return out
