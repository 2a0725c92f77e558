"""
What a trained model goes through when a study measures it, as one settings object with a method per measurement:
robustness against the noise level on the held-out data, answers to the instructions at the generation levels, and
the self-speculative decoding per exit layer. The study (`study/phases.py`) calls these right after a run trains and
its probe calls them on a short run to price them; they are the `eval robustness`, `eval generate` and `eval exits`
commands' own functions, given the study's settings instead of a command line.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import torch

from ..data import ModelSpec
from ..evaluation import ExitsModel, ModelResult
from ..evaluation.alpaca import AnswersFolder, GenerateArguments, generate_answers
from ..evaluation.exits import ExitsArguments, measure_exits
from ..evaluation.instructions import load_instructions
from ..evaluation.lengths import Decoding, check_decoding
from ..evaluation.loading import auto_bf16, reference_sigma
from ..evaluation.robustness import Measurement, measure_model
from ..noise import NoiseGrid

if TYPE_CHECKING:  # the tasks' classes are not imported to run this module
    from ..tasks import Task

_HELD_OUT: dict[str, object] = {}  # the last held-out data this process loaded (a `--jobs` worker runs several runs)


def held_out(task: Task, data_args: object, data_dir: str | None) -> object:
    """`task`'s held-out data for `data_args` (prepared once under `data_dir`: `data.prepared_splits`), loaded once
    per process: every run of a study, its probe and its comparison measure the same rows."""
    key = repr((task.name, data_args, data_dir))
    if key not in _HELD_OUT:
        _HELD_OUT.clear()
        _HELD_OUT[key] = task.measuring.evaluation_data(data_args, data_dir)
    return _HELD_OUT[key]


@dataclass(frozen=True)
class Evaluation:
    """What every run is measured with after it trains (fixed for the study): the robustness grid and its noise
    seeds, the instructions and how they are answered, the exit-layer decoding of seed 0 (`exit_prompts` 0: none),
    eager or compiled (`compile_decoding`).
    `sigma_x`: None takes each run's recorded scale (every run records its starting model's, the same base model;
    the study checks they agree)."""

    gammas: list[float]
    curve_gammas: list[float]
    train_gamma: float
    noise_seeds: int
    batch_size: int
    max_length: int
    instructions: str
    max_instances: int | None
    generation_gammas: list[float]
    generation_batch_size: int
    max_new_tokens: int
    exit_prompts: int
    exit_layers: list[int] | None
    exit_new_tokens: int
    bootstrap_samples: int
    sigma_x: float | None = None
    compile_decoding: bool = False

    def run_sigma(self, folder: str) -> float:
        """The sigma_x a run is measured with: the study's, else the one the run in `folder` recorded (every run
        records its starting model's); refused naming the run when neither says."""
        sigma = reference_sigma(self.sigma_x, folder)[0]
        if sigma is None:
            raise ValueError(
                f"{folder}: its constraints.json records no noise_sigma_x and the recipe sets no `noise_sigma`; "
                "train the run with this version (it records its starting model's), or set `noise_sigma`."
            )
        return sigma

    def check_decoding(self, spec: ModelSpec, rows: list[dict[str, str]]) -> None:
        """Room for the answers to `rows` (`--max_new_tokens`, `--generation_batch_size` prompts a call) and for the
        exit decoding of the first `exit_prompts` (`--exit_new_tokens`, one a call) in the model `spec` names, before
        any run trains: `evaluation.lengths.check_decoding`, as `eval generate` and `eval exits` check."""
        dtype = torch.bfloat16 if auto_bf16() else torch.float32
        noisy = any(g > 0 for g in self.generation_gammas)
        answers = Decoding(self.max_new_tokens, self.generation_batch_size, self.compile_decoding, noisy, dtype)
        check_decoding(spec, rows, None, answers)
        if self.exit_prompts:
            exits = Decoding(self.exit_new_tokens, 1, self.compile_decoding, False, dtype, "--exit_new_tokens")
            check_decoding(spec, rows[: self.exit_prompts], None, exits)

    @cached_property
    def instruction_count(self) -> int:
        """Instructions every model answers (read once per settings object; a plan prices answers by it)."""
        return len(load_instructions(self.instructions, self.max_instances))

    def measurement(
        self, task: Task, data: object, data_args: object, sigma: float | None, source: str | None = None
    ) -> Measurement:
        """The robustness measurement of every run (and of the study's comparison) on `data`."""
        return Measurement(
            task,
            data,
            data_args,
            NoiseGrid(tuple(self.gammas)),
            self.curve_gammas,
            self.train_gamma,
            self.noise_seeds,
            0.0,
            sigma,
            source,
            "trained",
            self.batch_size,
            self.max_length,
            auto_bf16(),
        )

    def robustness(
        self,
        task: Task,
        data_args: object,
        data_dir: str | None,
        folder: str,
        name: str,
        sigma: float,
        model: object = None,
        tokenizer: object = None,
    ) -> ModelResult:
        """The model in `folder` (or `model` / `tokenizer` loaded from it already) at every level and noise seed of
        the grid, on the held-out data of `data_args` (`held_out`)."""
        m = self.measurement(task, held_out(task, data_args, data_dir), data_args, sigma)
        return measure_model(m, name, folder, model, tokenizer).result

    def answer(self, folder: str, name: str, output_dir: str, sigma: float) -> dict[str, int]:
        """The model's answers at every generation level, written fresh to `<output_dir>/<name>/` (answers found
        there are a killed call's partial ones: removed); the empty answers per level (under heavy noise an empty
        answer is a result: judged a loss for the side that gave it)."""
        stale = AnswersFolder(output_dir).model(name)
        if os.path.isdir(stale):
            shutil.rmtree(stale)
        levels = generate_answers(
            GenerateArguments(
                model=folder,
                name=name,
                output_dir=output_dir,
                instructions=self.instructions,
                max_instances=self.max_instances,
                gammas=self.generation_gammas,
                sigma_x=sigma,
                batch_size=self.generation_batch_size,
                max_new_tokens=self.max_new_tokens,
                compile=self.compile_decoding,
            )
        )
        return {str(float(gamma)): level.empty for gamma, level in levels.items()}

    def exits_arguments(
        self, output_dir: str, models: list[str], names: list[str], sigma: float | None
    ) -> ExitsArguments:
        """`eval exits`'s settings for these models: each on the first `exit_prompts` instructions."""
        return ExitsArguments(
            models=models,
            names=names,
            output_dir=output_dir,
            exit_layers=self.exit_layers,
            instructions=self.instructions,
            max_instances=self.exit_prompts,
            max_new_tokens=self.exit_new_tokens,
            gammas=sorted(set(self.generation_gammas)),
            sigma_x=sigma,
            bootstrap_samples=self.bootstrap_samples,
            compile=self.compile_decoding,
        )

    def exit_rows(self) -> list[dict[str, str]]:
        """The instructions the exit-layer decoding reads (the first `exit_prompts`)."""
        return load_instructions(self.instructions, self.exit_prompts)

    def decode(self, folder: str, name: str, output_dir: str, sigma: float | None) -> ExitsModel:
        """The model's self-speculative decoding per exit layer and each layer's readout of the reference answers."""
        args = self.exits_arguments(output_dir, [folder], [name], sigma)
        return measure_exits(args, ModelSpec(name, folder), self.exit_rows(), sigma, auto_bf16())[0]
