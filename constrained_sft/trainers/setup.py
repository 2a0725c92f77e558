"""
What both constrained trainers build around their `Trainer`, written once: the arguments (a plain config converted,
a default made), the run's identity and the output-folder guard around construction (`building`), and the constrained
state of the run (`ConstrainedSetup`): the checks of its data and launch, the problem (`PrimalDual`), the noise
(`TrainingNoise`), the running statistics, and the callbacks that step the duals and print the console. The trainers
keep only what differs: their readout and how a batch becomes layer losses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
from transformers import TrainingArguments

from ..config import ConstraintArguments
from ..constraints import LayerStats, PrimalDual
from ..utils.types import Batch, Kwargs
from .callbacks import DualStepCallback, use_compact_console
from .noise import TrainingNoise
from .problem import own_primal_dual, primal_dual_from_config
from .resume import refusal_leaves_nothing, run_identity

if TYPE_CHECKING:
    from accelerate import Accelerator, PartialState

logger = logging.getLogger(__name__)


def check_not_empty(**datasets: Any) -> None:
    """Refuse, naming it, a dataset with no rows: TRL and transformers fail on one deep inside (StopIteration)."""
    for name, dataset in datasets.items():
        if dataset is not None and not isinstance(dataset, dict) and hasattr(dataset, "__len__") and not len(dataset):
            raise ValueError(f"`{name}` has no rows; give at least one example (or leave it None).")


C = TypeVar("C")  # the config class a trainer converts its arguments to


def constrained_args(args: object, config_class: type[C], trainer: str, default: Callable[[], C]) -> C:
    """
    `args` for a constrained trainer: a config with the constraint fields as it is; None: `default()`; a plain
    `TrainingArguments` (or `SFTConfig`) converted to `config_class`, as TRL's `SFTTrainer` converts
    `TrainingArguments`, every field kept and the constraint and noise fields at their defaults (said in one info
    line); anything else refused.
    """
    if args is None:
        return default()
    if isinstance(args, ConstraintArguments):  # any constrained config, as it is (TRL converts what it must)
        return cast(C, args)
    if not isinstance(args, TrainingArguments):
        raise TypeError(
            f"`args` must be a {config_class.__name__} (or TrainingArguments to convert), got {type(args).__name__}."
        )
    # the dataclass fields as set (`to_dict()` masks every `*_token` field, `eos_token` and `pad_token` included)
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.init}
    logger.info(
        "%s got a %s: converted to %s with the constraint and noise fields at their defaults.",
        trainer,
        type(args).__name__,
        config_class.__name__,
    )
    return config_class(**fields)


@contextlib.contextmanager
def building(trainer: Any, args: Any, model: Any, datasets: Kwargs) -> Iterator[None]:
    """
    Around a constrained trainer's construction: its run identity (from the arguments and the model as given), and
    the output-folder guard (a refusal inside leaves no folder behind: `resume.refusal_leaves_nothing`); empty
    `datasets` are refused first.
    """
    trainer.run_identity = run_identity(args, model)
    with refusal_leaves_nothing(args) as trainer.output_dir_existed:
        check_not_empty(**datasets)
        yield


def check_launch(processes: Accelerator | PartialState) -> None:
    """Refuse a launch of several processes that accelerate runs one by one (each would train its own model):
    `processes` is what accelerate made of the launch (a trainer's `Accelerator`, a study's `PartialState`), held
    against the processes the launcher started, which only its environment says."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))  # what `accelerate launch` / torchrun started
    if launched > 1 and processes.num_processes != launched:
        raise ValueError(
            f"{launched} processes were launched, but accelerate runs this one alone (distributed type "
            f"{processes.distributed_type.value}): each process would train its own model and write the "
            "same files. Without a GPU, launch with `--multi_gpu` and `use_cpu` (gloo), or a DeepSpeed config "
            "with `--use_cpu false`; `ddp_backend` names another backend."
        )


def check_vocabulary(tokenizer: Any, model: Any) -> None:
    """A tokenizer with more tokens than the model has embedding rows is refused before any step, naming both sizes:
    its last ids would index past the embedding (an `IndexError` at the first batch that holds one; tokens added to
    the tokenizer at the model's path after the model was saved, say). A model whose embedding is the larger (rows
    padded to a multiple) is fine; a trainer without a tokenizer (video) has nothing to check."""
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor holds its tokenizer
    if not hasattr(tokenizer, "__len__") or not hasattr(model, "get_input_embeddings"):
        return
    embedding = model.get_input_embeddings()
    rows = getattr(embedding, "num_embeddings", None)
    if isinstance(rows, int) and rows > 0 and len(tokenizer) > rows:  # a ZeRO-3 shard reports 0 rows: not checked
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens and the model's input embedding {rows} rows: ids {rows} to "
            f"{len(tokenizer) - 1} cannot be embedded. Use the model's own tokenizer, or resize the model's embeddings "
            "to the tokenizer (`model.resize_token_embeddings(len(tokenizer))`) and save it before training."
        )


def first_batch(trainer: Any, data: Any = None, size: int | None = None) -> Batch | None:
    """The first `size` rows of `data` (default: the training data, `per_device_train_batch_size`), collated as
    training collates them, on the model's device (no sampler, no random state touched); None without data."""
    data = trainer.train_dataset if data is None else data
    if data is None:
        return None
    rows = list(itertools.islice(iter(data), size or trainer.args.per_device_train_batch_size))
    batch = trainer.data_collator(rows)
    device = next(trainer.model.parameters()).device
    return {k: v.to(device) for k, v in batch.items() if torch.is_tensor(v) and k != "noise_gamma"}


class ConstrainedSetup:
    """
    The constrained state of one trainer, built once `Trainer.__init__` has run (after TRL's dataset filters): the
    problem, the noise, the evaluation's layer statistics, the optimizer steps' metrics awaiting the next log, and
    the callbacks (the dual step; the compact console).
    """

    def __init__(self, trainer: Any, num_layers: int, primal_dual: PrimalDual | None = None) -> None:
        args = trainer.args
        if not isinstance(args, ConstraintArguments):
            raise TypeError(
                f"{type(trainer).__name__} needs a config with the constraint fields (e.g. `ConstrainedSFTConfig`), "
                f"got {type(args).__name__}."
            )
        check_not_empty(train_dataset=trainer.train_dataset, eval_dataset=trainer.eval_dataset)  # after TRL's filters
        check_vocabulary(getattr(trainer, "processing_class", None), trainer.model)
        if getattr(args, "constraint_warmup_epochs", 0) and not hasattr(trainer.train_dataset, "__len__"):
            raise ValueError(
                "`constraint_warmup_epochs` counts epochs of a training set of known length, but `train_dataset` is "
                "streamed (an IterableDataset, no length); set `constraint_warmup_steps` instead."
            )
        check_launch(trainer.accelerator)
        if primal_dual is not None:
            self.problem = own_primal_dual(primal_dual, num_layers)
        else:
            self.problem = primal_dual_from_config(args, num_layers)
        self.noise = TrainingNoise(args, trainer.model, step=lambda: trainer.state.global_step)
        self.noise.measure_images(trainer.model, lambda: first_batch(trainer))
        self.eval_stats = LayerStats(len(self.problem.spec.layers))
        self.train_metrics: dict[str, list[float]] = defaultdict(list)  # log key -> one value per optimizer step
        self.bound_checked = False  # the constraints' bound on the last layer is checked once, at the first step
        trainer.add_callback(DualStepCallback(trainer))
        if args.console_format == "compact":
            use_compact_console(trainer)

    def reset_eval_stats(self) -> None:
        self.eval_stats = LayerStats(len(self.problem.spec.layers))
