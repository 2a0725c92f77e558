"""
What every constrained trainer shares, whatever its readout: the Lagrangian term, the dual step once per optimizer
step, the public metrics, and the feasibility report at the end of training (checkpoints: `checkpoints`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import zlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch
from transformers import TrainerCallback, TrainingArguments

from ..config import ConstraintArguments
from ..constraints import LayerLosses, LayerStats, PrimalDual, stats_metrics
from ..constraints.feasibility import bound_message, verdict_message
from ..constraints.state_io import REPORT
from ..noise import EmbeddingNoiseError, NoiseLevels, embedding_noise, embedding_sigma
from ..utils import write_json
from .checkpointing import CheckpointingMixin
from .console import use_compact_console
from .host_allocator import reuse_freed_host_memory
from .nonfinite import handle_nonfinite
from .problem import own_primal_dual, primal_dual_from_config

logger = logging.getLogger(__name__)


@dataclass
class BatchScore:
    """
    A held-out batch as `score_batch` sees it: per-example sums of the final layer's scores, and the measured layers'
    losses. Each tensor of `examples` is `[B]` (one entry per row, in batch order): `count` (supervised tokens of the
    row, or 1 for a classifier or denoiser example), `loss` (the row's summed final-layer loss: token NLL, class
    cross-entropy or squared error) and, with class or token targets, `correct` (top-1 hits). Summed over rows and
    divided by `count`, they give the batch's accuracy and mean loss.
    """

    examples: dict[str, torch.Tensor]
    layers: LayerLosses


def check_not_empty(**datasets: Any) -> None:
    """Refuse, naming it, a dataset with no rows: TRL and transformers fail on one deep inside (StopIteration)."""
    for name, dataset in datasets.items():
        if dataset is not None and not isinstance(dataset, dict) and hasattr(dataset, "__len__") and not len(dataset):
            raise ValueError(f"`{name}` has no rows; give at least one example (or leave it None).")


def constrained_args(args: Any, config_class: type, trainer: str) -> Any:
    """
    `args` for a constrained trainer: a config with the constraint fields as it is; a plain `TrainingArguments` (or
    `SFTConfig`) converted to `config_class`, as TRL's `SFTTrainer` converts `TrainingArguments`, every field kept
    and the constraint and noise fields at their defaults (said in one info line); anything else refused.
    """
    if isinstance(args, ConstraintArguments):
        return args
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


class _DualStep(TrainerCallback):
    """
    Runs once all gradient-accumulation micro-batches of an optimizer step have run (and the gradients are clipped),
    just before `optimizer.step()`, on every rank: the dual step, and the non-finite guard that may stop training or
    drop the step's gradients before the parameters move.
    """

    def __init__(self, trainer: ConstrainedTrainerMixin) -> None:
        self.trainer = trainer

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.trainer._dual_step()

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        """`constraint_warmup_epochs` in optimizer steps, now that the epoch length is known."""
        epochs = getattr(args, "constraint_warmup_epochs", 0)
        if epochs and train_dataloader is not None:
            per_epoch = max(math.ceil(len(train_dataloader) / args.gradient_accumulation_steps), 1)
            pd = self.trainer.primal_dual
            pd.warmup_steps = max(args.constraint_warmup_steps, epochs * per_epoch)

    def on_epoch_begin(self, args, state, control, **kwargs):
        """Resilience restarts: u = 0 when an epoch after the first starts (not when a run resumes inside one)."""
        if getattr(args, "resilience_restarts", False) and state.epoch and float(state.epoch).is_integer():
            self.trainer.primal_dual.dual.reset_relaxation()


class ConstrainedTrainerMixin(CheckpointingMixin):
    """Mixed in before a `transformers.Trainer` subclass; `args` must carry [`ConstraintArguments`]."""

    primal_dual: PrimalDual

    def _init_constraints(self, num_layers: int, primal_dual: PrimalDual | None = None) -> None:
        args = self.args
        if not isinstance(args, ConstraintArguments):
            raise TypeError(
                f"{type(self).__name__} needs a config with the constraint fields (e.g. `ConstrainedSFTConfig`), got "
                f"{type(args).__name__}."
            )
        check_not_empty(train_dataset=self.train_dataset, eval_dataset=self.eval_dataset)  # after TRL's filters
        if getattr(args, "constraint_warmup_epochs", 0) and not hasattr(self.train_dataset, "__len__"):
            raise ValueError(
                "`constraint_warmup_epochs` counts epochs of a training set of known length, but `train_dataset` is "
                "streamed (an IterableDataset, no length); set `constraint_warmup_steps` instead."
            )
        launched = int(os.environ.get("WORLD_SIZE", "1"))
        if launched > 1 and self.accelerator.num_processes != launched:
            raise ValueError(
                f"{launched} processes were launched, but accelerate runs this one alone (distributed type "
                f"{self.accelerator.distributed_type.value}): each process would train its own model and write the "
                "same files. Without a GPU, launch with `--multi_gpu` and `use_cpu` (gloo), or a DeepSpeed config "
                "with `--use_cpu false`; `ddp_backend` names another backend."
            )
        if args.host_allocator == "reuse" and args.device.type == "cpu":
            reuse_freed_host_memory()
        if primal_dual is not None:
            self.primal_dual = own_primal_dual(primal_dual, num_layers)
        else:
            self.primal_dual = primal_dual_from_config(args, num_layers)
        spec = self.primal_dual.spec
        self._eval_stats = LayerStats(len(spec.layers))
        self._constraint_metrics: dict[str, dict[str, list[float]]] = {"train": defaultdict(list)}
        self._draws: dict[str, int] = defaultdict(int)
        self._noise_eval = False
        self._bound_checked = False
        self.noise_sigma = self._reference_sigma()
        gamma = getattr(args, "noise_gamma", 0.0)
        self._noise_levels = NoiseLevels(
            gamma=None if isinstance(gamma, list) else gamma,
            gamma_range=gamma if isinstance(gamma, list) else None,
            clean_prob=getattr(args, "noise_clean_prob", 0.0),
        )
        self.add_callback(_DualStep(self))
        if args.console_format == "compact":
            use_compact_console(self)

    def _reference_sigma(self) -> float | None:
        """sigma_x of every noisy forward of this trainer: `noise_sigma`, else the starting model's, measured now."""
        given = getattr(self.args, "noise_sigma", None)
        if given is not None:
            return given
        try:
            return embedding_sigma(self.model)
        except EmbeddingNoiseError as error:
            if getattr(self.args, "uses_noise", False):
                raise EmbeddingNoiseError(
                    f"`noise_gamma` / `eval_noise_gammas` perturb the input embeddings, but {error} Train this model "
                    "with `noise_gamma: 0` and no `eval_noise_gammas`, or use a model whose token embeddings come "
                    "from `get_input_embeddings()`."
                ) from None
            return None  # a model without input embeddings, trained without noise

    # --- the loss -------------------------------------------------------------------------------------------------
    def _constraints_active(self) -> bool:
        return self.model.training and self.primal_dual.active(self.state.global_step)

    def _generator(self, purpose: str, device: torch.device) -> torch.Generator:
        """A private stream per (purpose, seed, step, draw, rank): reproducible, resumable, global RNG untouched."""
        key = f"{purpose}/{self.args.seed}/{self.state.global_step}/{self._draws[purpose]}/{self.args.process_index}"
        self._draws[purpose] += 1
        return torch.Generator(device=device).manual_seed(zlib.crc32(key.encode()))

    def _row_stream(self, purpose: str, rows: int) -> tuple[int, int]:
        """
        (seed, first global row) of a micro-batch of `rows` rows, for streams keyed by row (see `row_keys`): the
        seed is a function of (purpose, seed, step), the row of (micro-batch, rank), so a sequence draws the same
        whatever the split of the global batch into micro-batches and ranks.
        """
        micro = self._draws[purpose]
        self._draws[purpose] += 1
        seed = zlib.crc32(f"{purpose}/{self.args.seed}/{self.state.global_step}".encode())
        return seed, (micro * self.args.world_size + self.args.process_index) * rows

    def _noise(self, model, inputs: dict[str, Any]):
        """
        Embedding noise for one forward: per-example levels from a collator's `noise_gamma` (popped: it never
        reaches the model), else in training the config's `noise_gamma` drawn by [`_training_levels`].
        """
        gamma = inputs.pop("noise_gamma", None)
        if gamma is None:
            gamma = self._training_levels(inputs)
        if gamma is None:
            return contextlib.nullcontext()
        generator = self._generator("noise", gamma.device)
        return embedding_noise(
            model, gamma=gamma, mean=self.args.noise_mean, generator=generator, sigma=self.noise_sigma
        )

    def _training_levels(self, inputs: dict[str, Any]) -> torch.Tensor | None:
        """
        `[n]` levels for a training micro-batch: one per row, or one per document of a padding-free row (documents
        start where `position_ids` restart at 0). Drawn from the (seed, step, micro-batch, rank) stream, so a resumed
        run draws exactly what the uninterrupted run drew, and no two ranks or workers share a stream.
        """
        args = self.args
        if not (self.model.training and getattr(args, "trains_with_noise", False)):
            return None
        ids, positions = inputs.get("input_ids"), inputs.get("position_ids")
        if ids is None:  # models fed something else (a denoiser's `input_values`): one level per row
            ids = next(v for k, v in inputs.items() if torch.is_tensor(v) and k != "labels")
        n = int(positions.eq(0).sum()) if positions is not None and ids.shape[0] == 1 else ids.shape[0]
        levels = self._noise_levels.sample(max(n, 1), self._generator("noise-levels", torch.device("cpu")))
        return levels.to(ids.device)

    def _reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum over data-parallel ranks (in one process, the tensor itself: accelerate would only clone it)."""
        tensor = tensor.to(self.accelerator.device)
        return self.accelerator.reduce(tensor, reduction="sum") if self.accelerator.num_processes > 1 else tensor

    def _loss_denominator(self, num_items_in_batch: Any, local_items: torch.Tensor) -> torch.Tensor | float:
        """What TRL / Trainer divide the objective by (tokens or examples), so the penalty is normalised alike."""
        if num_items_in_batch is None:
            return local_items.clamp(min=1)
        if self.args.average_tokens_across_devices:
            processes = self.accelerator.num_processes // self.get_tp_size()
            return num_items_in_batch / processes if processes != 1 else num_items_in_batch
        return num_items_in_batch

    def _add_constraints(self, loss: torch.Tensor, losses: LayerLosses, num_items_in_batch: Any) -> torch.Tensor:
        """Record the layer statistics; while constraints are active, add the Lagrangian penalty to `loss`."""
        if not self.model.training:  # evaluation: reduce per batch, every rank runs every eval batch
            self._eval_stats.add(losses, reduce=self._reduce)
            return loss
        self.primal_dual.train_stats.add(losses)
        if not self._constraints_active():
            return loss
        return loss + self.primal_dual.penalty(losses) / self._loss_denominator(num_items_in_batch, losses.num_tokens)

    # --- once per optimizer step ----------------------------------------------------------------------------------
    def _get_grad_norm(self, model, grad_norm=None):
        """transformers' global gradient norm of the step (a device scalar), kept for the non-finite guard."""
        self._step_grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        return self._step_grad_norm

    def _dual_step(self) -> None:
        grad_norm = getattr(self, "_step_grad_norm", None)
        self._step_grad_norm = None
        spec = self.primal_dual.spec
        stats = self.primal_dual.step(self.state.global_step, self._reduce, grad_norm)
        metrics = stats.metrics(spec) if stats is not None else {}
        self._draws.clear()
        if not self.primal_dual.last_step_finite:
            handle_nonfinite(self, metrics, self.primal_dual.last_grad_norm)
            return
        if stats is not None and not self._bound_checked and self.primal_dual.enabled:
            self._bound_checked = True  # once, on the first measured step
            message = bound_message(spec, dict(zip(spec.layers, stats.layer_loss, strict=True)))
            if message is not None and self.is_world_process_zero():
                logger.warning(message)
        for key, value in metrics.items():
            self._constraint_metrics["train"][key].append(value)

    # --- logging --------------------------------------------------------------------------------------------------
    def evaluation_loop(self, *args, **kwargs):
        """Every evaluation or prediction loop starts from empty statistics: `predict()` never calls `log()`, which
        is where they are otherwise emptied."""
        self._reset_eval_statistics()
        return super().evaluation_loop(*args, **kwargs)

    def _reset_eval_statistics(self) -> None:
        self._eval_stats = LayerStats(len(self.primal_dual.spec.layers))
        trl_metrics = getattr(self, "_metrics", {}).get("eval")  # TRL's own eval metrics leak the same way
        if trl_metrics:
            trl_metrics.clear()

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"):
        """Clean evaluation, then (with `eval_noise_gammas`) one seeded evaluation per noise level."""
        self._eval_prefix = metric_key_prefix
        metrics = super().evaluate(
            eval_dataset=eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix
        )
        levels = getattr(self.args, "eval_noise_gammas", None)
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if not levels or self._noise_eval or isinstance(dataset, dict):  # a dict comes back here once per dataset
            return metrics
        self._noise_eval = True
        try:
            for i, gamma in enumerate(levels):
                prefix = f"{metric_key_prefix}_gamma_{gamma:g}"
                self._eval_prefix = prefix
                seed = self.args.seed + 7919 * (i + 1) + 104729 * self.args.process_index
                noise = embedding_noise(
                    self.model, gamma=gamma, mean=self.args.noise_mean, seed=seed, sigma=self.noise_sigma
                )
                with noise:
                    metrics.update(
                        super().evaluate(eval_dataset=eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=prefix)
                    )
        finally:
            self._noise_eval = False
            self._eval_prefix = metric_key_prefix
        return metrics

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.model.training:
            buffer = self._constraint_metrics["train"]
            logs.update({key: sum(values) / len(values) for key, values in buffer.items() if values})
            buffer.clear()
            if self.primal_dual.enabled:
                logs.update(self.primal_dual.dual_metrics())
        else:
            prefix = getattr(self, "_eval_prefix", "eval")
            if self._eval_stats.totals is not None:
                metrics = stats_metrics(self.primal_dual.spec, self._eval_stats.pop(lambda t: t))
                logs.update({f"{prefix}_{key}": value for key, value in metrics.items()})
            trl_metrics = getattr(self, "_metrics", {}).get("eval")
            if prefix != "eval" and trl_metrics:  # TRL names its eval metrics eval_*; keep them under this prefix
                logs.update({f"{prefix}_{key}": sum(v) / len(v) for key, v in trl_metrics.items() if v})
                trl_metrics.clear()
        super().log(logs, start_time)

    # --- end of training ------------------------------------------------------------------------------------------
    def train(self, *args, **kwargs):
        output = super().train(*args, **kwargs)
        self.write_constraint_report()
        return output

    def write_constraint_report(self) -> dict[str, Any]:
        """Write `constraints.json` to `output_dir`; warn when constrained training ended infeasible (see [`verdict_message`])."""
        summary = self.primal_dual.summary()
        summary["global_step"] = self.state.global_step
        summary["noise_gamma"] = self.args.noise_gamma  # the evaluation's ID / OOD boundary
        summary["noise_sigma_x"] = self.noise_sigma  # the scale every evaluation of this run's models should share
        if self.args.should_save:
            os.makedirs(self.args.output_dir, exist_ok=True)
            write_json(os.path.join(self.args.output_dir, REPORT), summary)
        message = verdict_message(summary, self.args.dual_max)
        if message is not None and self.is_world_process_zero():
            level, text = message
            logger.log(level, "%s See %s.", text, os.path.join(self.args.output_dir, REPORT))
        return summary
