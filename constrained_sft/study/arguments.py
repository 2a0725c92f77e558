"""The study's own options (`constrained-sft study --help`), beside the constrained recipe's fields."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias, get_args

from ..comparison import ERM, TWINS, arm_recipes, recipe_identity, reference_arm
from ..evaluation.alpaca import AlpacaArguments, judges_help
from ..evaluation.instructions import ALPACA_EVAL
from ..noise import NoiseGrid
from ..utils.fields import check_fields
from ..utils.output_folders import check_output_folder
from ..utils.shipped import check_launch_config, find
from ..utils.types import JSONObject
from .phases import KeepModels

if TYPE_CHECKING:
    from ..tasks import AnyRecipe

Stage: TypeAlias = Literal["train", "evaluate", "all"]
STAGES: tuple[Stage, ...] = get_args(Stage)
HELD_OUT = "held_out"


@dataclass
class StudyArguments:
    erm_config: str | None = field(
        default=None,
        metadata={"help": "The ERM twin's recipe: the constrained recipe (--config) with `constraints: none`."},
    )
    arm: list[str] | None = field(
        default=None,
        metadata={
            "help": "More arms beside constrained and ERM, repeatable: NAME=RECIPE.yaml, a recipe with the same data "
            "and model (e.g. --arm penalty=recipes/.../penalty.yaml --arm neftune=recipes/.../neftune.yaml); the "
            "command line's recipe overrides reach every arm.",
            "action": "extend",
        },
    )
    reference: str = field(
        default=ERM,
        metadata={"help": "The arm every other arm is compared with, A - reference (default: the ERM twin)."},
    )
    study_dir: str | None = field(
        default=None, metadata={"help": "Where the study writes (default: <the recipe's output_dir>-study)."}
    )
    training_seeds: int = field(
        default=3, metadata={"help": "Training seeds per arm (0..N-1); a finished run is reused, so a study resumes."}
    )
    stage: Stage = field(
        default="all",
        metadata={
            "help": "'train' (the runs only: what `accelerate launch` runs on several GPUs), 'evaluate' (robustness, "
            "generation, judging and the report, in one process) or 'all'."
        },
    )
    gammas: list[float] | None = field(
        default=None,
        metadata={"help": "Robustness noise levels (default: 0 to 4x the training level in 5 steps)."},
    )
    noise_seeds: int = field(default=1, metadata={"help": "Noise seeds per robustness level and model."})
    bootstrap_samples: int = field(default=2000, metadata={"help": "Bootstrap resamples per interval."})
    generation_gammas: list[float] = field(
        default_factory=lambda: [0.0, 1.5],
        metadata={"help": "Levels at which the models answer the instructions (the paper judges gamma 1.5)."},
    )
    instructions: str = field(
        default=HELD_OUT,
        metadata={
            "help": f"'{HELD_OUT}' (the first user turns of the recipe's held-out conversations never trained on, "
            f"with their answers as references), {ALPACA_EVAL!r} (Hub: AlpacaEval's 805) or a .json/.jsonl file "
            "with an `instruction` (and `reference`) field."
        },
    )
    max_instances: int | None = field(default=None, metadata={"help": "Answer only the first N instructions."})
    max_new_tokens: int = field(default=256, metadata={"help": "Longest answer, in tokens (greedy decoding)."})
    generation_batch_size: int = field(default=8, metadata={"help": "Instructions per generate() call."})
    judge: str = field(default="proxy", metadata={"help": judges_help()})
    judge_model: str | None = field(
        default=None,
        metadata={
            "help": "local: a chat model (folder, Hub id, pkg: alias); proxy: the encoder; gpt5, openai-compatible: "
            "the model."
        },
    )
    judge_batch_size: int = field(default=8, metadata={"help": "local / proxy judge: prompts per forward pass."})
    judge_base_url: str | None = field(
        default=None,
        metadata={"help": "openai-compatible judge: the server's OpenAI API root (e.g. http://localhost:8000/v1)."},
    )
    judge_timeout: float | None = field(
        default=None,
        metadata={"help": "API judges: seconds a request may wait for its answer (default: the openai client's 600)."},
    )
    examples: int = field(default=3, metadata={"help": "Answers shown side by side per level in the report."})
    exit_prompts: int = field(
        default=4,
        metadata={
            "help": "Instructions each arm's seed-0 model decodes self-speculatively, drafting with its first l "
            "layers (`eval exits`, batch 1), and whose reference answers each layer reads out at the generation "
            "levels; 0 skips this stage."
        },
    )
    exit_layers: list[int] | None = field(
        default=None, metadata={"help": "The draft's exit layers l (default: L/4, L/2 and 3L/4)."}
    )
    exit_new_tokens: int = field(default=32, metadata={"help": "New tokens per self-speculative decoding."})
    compile_decoding: bool = field(
        default=False,
        metadata={
            "help": "Answers and exit decodings with a static KV cache and a torch.compile'd step (`eval generate "
            "--compile`, `eval exits --compile`): the same greedy tokens; each run's first batch pays the compile."
        },
    )
    jobs: int = field(
        default=1,
        metadata={
            "help": "Runs at once, each in its own process on the same device (a small model leaves a GPU mostly idle; "
            "the results equal --jobs 1's). Each run is measured, answers and (seed 0) decodes right after it trains."
        },
    )
    gpus_per_run: int = field(
        default=1,
        metadata={
            "help": "GPUs each run holds: with --jobs N on a machine with several GPUs each run gets its own "
            "(CUDA_VISIBLE_DEVICES); above 1 a run trains under `accelerate launch` with --accelerate_config. With "
            "--launcher slurm: the GPUs each job asks for."
        },
    )
    accelerate_config: str | None = field(
        default=None,
        metadata={
            "help": "The launch config of runs with --gpus_per_run > 1: a file or a shipped name (ddp, fsdp2, "
            "deepspeed_zero3; default: the one the recipe's first line launches with, else ddp)."
        },
    )
    keep_models: KeepModels = field(
        default="all",
        metadata={
            "help": "The trained weights kept once a run's results are recorded: 'all', 'seed0' (each arm's seed 0) "
            "or 'none'. The study continues and reports from its records alone."
        },
    )
    time_budget: float | None = field(
        default=None,
        metadata={
            "help": "Minutes this call may take: the study times a few steps, prints its plan and starts no run that "
            "cannot finish in time; the same command continues with the runs left."
        },
    )

    def __post_init__(self) -> None:
        check_fields(self)
        check_output_folder(self.study_dir, "--study_dir")

    def validate(self) -> None:
        if not self.erm_config:
            raise ValueError(
                "`--erm_config` is required: the ERM twin's recipe (the same recipe, `constraints: none`)."
            )
        if not os.path.isfile(self.erm_config):
            raise FileNotFoundError(f"`--erm_config` {self.erm_config!r} does not exist; give the ERM recipe's path.")
        for name in ("training_seeds", "noise_seeds", "bootstrap_samples", "max_new_tokens", "generation_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"`--{name}` must be >= 1, got {getattr(self, name)}.")
        if self.examples < 0 or (self.max_instances is not None and self.max_instances < 1):
            raise ValueError("`--examples` must be >= 0 and `--max_instances` >= 1 or unset.")
        if (
            self.exit_prompts < 0
            or self.exit_new_tokens < 1
            or (self.exit_layers is not None and min(self.exit_layers, default=0) < 1)
        ):
            raise ValueError(
                f"`--exit_prompts` must be >= 0, `--exit_new_tokens` >= 1 and `--exit_layers` layers >= 1; got "
                f"{self.exit_prompts}, {self.exit_new_tokens}, {self.exit_layers}."
            )
        for name in ("gammas", "generation_gammas"):
            if getattr(self, name) is not None:
                NoiseGrid.parse(getattr(self, name), f"--{name}")
        if self.gammas is not None and len(set(self.gammas)) < 2:
            raise ValueError(f"`--gammas` needs >= 2 distinct levels for the curves, got {self.gammas}.")
        if self.jobs < 1 or self.gpus_per_run < 1:
            raise ValueError(f"`--jobs` and `--gpus_per_run` must be >= 1, got {self.jobs} and {self.gpus_per_run}.")
        if self.accelerate_config is not None:
            check_launch_config(
                find(self.accelerate_config, "--accelerate_config", launch=True), "--accelerate_config"
            )
        if self.keep_models != "all" and self.stage == "train":
            raise ValueError(
                f"`--keep_models {self.keep_models}` with `--stage train`: weights are deleted only once a run's "
                "results are recorded, and the training stage records none; keep them (all) or use `--stage all`."
            )
        if self.time_budget is not None and not (math.isfinite(self.time_budget) and self.time_budget > 0):
            raise ValueError(f"`--time_budget` must be a number of minutes > 0, got {self.time_budget}.")
        reference_arm(self.reference, [*TWINS, *self.extra_arms()])
        source = self.instructions
        if source not in (HELD_OUT, ALPACA_EVAL) and not (
            os.path.isfile(source) and source.endswith((".json", ".jsonl"))
        ):
            raise ValueError(
                f"`--instructions` {source!r}: allowed are {HELD_OUT!r}, {ALPACA_EVAL!r} or an existing .json/.jsonl "
                "file."
            )

    def judging(self, model: str, reference: str) -> AlpacaArguments:
        """The study's judge as `eval alpaca` takes it: `model`'s answers judged against `reference`'s."""
        return AlpacaArguments(
            model=model,
            reference=reference,
            judge=self.judge,
            judge_model=self.judge_model,
            judge_batch_size=self.judge_batch_size,
            judge_base_url=self.judge_base_url,
            judge_timeout=self.judge_timeout,
            bootstrap_samples=self.bootstrap_samples,
        )

    def folder_settings(self, recipes: Mapping[str, AnyRecipe]) -> JSONObject:
        """What decides a study's results, for its folder (`utils.output_folders`): every arm's recipe (but for the
        seed) and the evaluation options. A continuation may add training seeds; where the study writes, which stage
        runs, the intervals' resamples, the report's examples, and where and how the runs run and decode (jobs, devices,
        compiled decoding: the same greedy tokens) decide nothing."""
        skip = (
            "study_dir",
            "stage",
            "training_seeds",
            "bootstrap_samples",
            "examples",
            "erm_config",
            "arm",
            "jobs",
            "compile_decoding",
            "gpus_per_run",
            "accelerate_config",
            "keep_models",
            "time_budget",
            "judge_base_url",
            "judge_timeout",
        )  # fmt: skip (where a judge is served, and how long it may take, decide nothing)
        settings = {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}
        settings["arms"] = {arm: recipe_identity(recipe) for arm, recipe in recipes.items()}
        if os.path.isfile(self.instructions):
            with open(self.instructions, "rb") as f:
                settings["instructions_sha"] = hashlib.sha256(f.read()).hexdigest()[:16]
        return settings

    def extra_arms(self) -> dict[str, str]:
        """{name: recipe path} of every `--arm` (`comparison.arm_recipes`; the twins' names are taken)."""
        return arm_recipes(self.arm)
