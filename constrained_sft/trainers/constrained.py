"""
How constrained training works, whatever the readout, as the hooks of a `Trainer`: the Lagrangian penalty added to
each micro-batch's loss, the dual step once per optimizer step (run by `callbacks.DualStepCallback`), the evaluations
(clean, then noisy: `noise.TrainingNoise.evaluate`), the layer statistics merged into the logs, and the feasibility
report at the end of training. What a trainer builds around its `Trainer` (the problem, the noise, the statistics, the
callbacks, the checks) is `setup.py`; resume and every private `Trainer` override live in `resume/`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..constraints import LayerLosses, PrimalDual, stats_metrics
from ..constraints.feasibility import REPORT, FeasibilityReport, bound_message, verdict_message
from ..utils.files import write_json
from ..utils.modules import unwrap_model
from .callbacks import handle_nonfinite
from .model_card import CARD, check_card_path, model_card, save_card
from .noise import TrainingNoise
from .resume import RunIdentity, TrainerOverrides, model_source, start_run, trl_eval_metrics
from .setup import ConstrainedSetup

if TYPE_CHECKING:
    from ..config import ConstrainedConfig, ConstrainedSFTConfig

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


class ConstrainedTrainerMixin(TrainerOverrides):
    """Mixed in before a `transformers.Trainer` subclass, whose `__init__` builds `self.setup` (`setup.
    ConstrainedSetup`: the problem, the noise, the statistics, the callbacks); these are the hooks."""

    setup: ConstrainedSetup
    # what the run is (`resume.RunIdentity`): set by the setup from the arguments and model, then by the task with the
    # data it trains on; the model card and the output-folder check read it
    run_identity: RunIdentity | None = None
    if TYPE_CHECKING:  # the Trainer's, as these hooks read them once it is built
        model: nn.Module  # never None: a Trainer needs a model or a model_init
        args: ConstrainedConfig | ConstrainedSFTConfig

    @property
    def output_folder(self) -> str:
        """`output_dir`, which `TrainingArguments` always sets (to 'trainer_output' where none was given)."""
        folder = self.args.output_dir
        if folder is None:
            raise ValueError("the trainer's `output_dir` is unset.")
        return folder

    @property
    def primal_dual(self) -> PrimalDual:
        """The run's constrained problem (the setup's)."""
        return self.setup.problem

    @property
    def noise(self) -> TrainingNoise:
        """The run's embedding noise (the setup's)."""
        return self.setup.noise

    @property
    def noise_sigma(self) -> float | None:
        """sigma_x of every noisy forward of this trainer (`noise_sigma`, else the starting model's)."""
        return self.noise.sigma

    # --- the loss -------------------------------------------------------------------------------------------------
    def _constraints_active(self) -> bool:
        return self.model.training and self.primal_dual.active(self.state.global_step)

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
            self.setup.eval_stats.add(losses, reduce=self._reduce)
            return loss
        self.primal_dual.train_stats.add(losses)
        if not self._constraints_active():
            return loss
        return loss + self.primal_dual.penalty(losses) / self._loss_denominator(num_items_in_batch, losses.num_tokens)

    # --- once per optimizer step ----------------------------------------------------------------------------------
    def dual_step(self) -> None:
        """
        Once all micro-batches of an optimizer step have run and the gradients are clipped, before the parameters
        move (`DualStepCallback`): the multipliers' step on the global-batch slack, the non-finite guard, and the
        step's metrics kept for the next log. Every rank runs it on the same reduced statistics.
        """
        grad_norm = getattr(self, "_step_grad_norm", None)  # kept by the `_get_grad_norm` override
        self._step_grad_norm = None
        spec = self.primal_dual.spec
        stats = self.primal_dual.step(self.state.global_step, self._reduce, grad_norm)
        metrics = stats.metrics(spec) if stats is not None else {}
        self.noise.next_step()
        if not self.primal_dual.last_step_finite:
            handle_nonfinite(self, metrics, self.primal_dual.last_grad_norm)
            return
        if stats is not None and not self.setup.bound_checked and self.primal_dual.enabled:
            self.setup.bound_checked = True  # once, on the first measured step
            message = bound_message(spec, dict(zip(spec.layers, stats.layer_loss, strict=True)))
            if message is not None and self.is_world_process_zero():
                logger.warning(message)
        for key, value in metrics.items():
            self.setup.train_metrics[key].append(value)

    # --- evaluation and logging -----------------------------------------------------------------------------------
    def evaluation_loop(self, *args, **kwargs):
        """Every evaluation or prediction loop starts from empty statistics: `predict()` never calls `log()`, which
        is where they are otherwise emptied."""
        self._reset_eval_statistics()
        return super().evaluation_loop(*args, **kwargs)

    def _reset_eval_statistics(self) -> None:
        self.setup.reset_eval_stats()
        trl_metrics = trl_eval_metrics(self)  # TRL's own eval metrics leak the same way
        if trl_metrics:
            trl_metrics.clear()

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"):
        """Clean evaluation, then (with `eval_noise_gammas`) one seeded evaluation per noise level
        (`TrainingNoise.evaluate`), each logged under its own prefix."""

        def run(prefix: str) -> dict[str, float]:
            self._eval_prefix = prefix
            return super(ConstrainedTrainerMixin, self).evaluate(
                eval_dataset=eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=prefix
            )

        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        try:
            return self.noise.evaluate(run, self.model, metric_key_prefix, several=isinstance(dataset, dict))
        finally:
            self._eval_prefix = metric_key_prefix

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """The optimizer steps' constraint metrics (means since the last log) and the multipliers in a training
        log; the layer statistics of an evaluation under its prefix."""
        if self.model.training:
            train_metrics = self.setup.train_metrics
            logs.update({key: sum(values) / len(values) for key, values in train_metrics.items() if values})
            train_metrics.clear()
            if self.primal_dual.enabled:
                logs.update(self.primal_dual.dual_metrics())
        else:
            prefix = getattr(self, "_eval_prefix", "eval")
            if self.setup.eval_stats.totals is not None:
                metrics = stats_metrics(self.primal_dual.spec, self.setup.eval_stats.pop_totals(lambda t: t))
                logs.update({f"{prefix}_{key}": value for key, value in metrics.items()})
            trl_metrics = trl_eval_metrics(self)
            if prefix != "eval" and trl_metrics:  # TRL names its eval metrics eval_*; keep them under this prefix
                logs.update({f"{prefix}_{key}": sum(v) / len(v) for key, v in trl_metrics.items() if v})
                trl_metrics.clear()
        super().log(logs, start_time)

    # --- the run --------------------------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        """
        `Trainer.train`, after checking the output folder (`resume.run_folder`): `resume_from_checkpoint=True` takes
        the newest *complete* checkpoint, unset it resumes the same run's own folder, and the checkpoint must fit this
        run; then the feasibility report (`write_constraint_report`).
        """
        if self.is_world_process_zero():
            check_card_path(self.output_folder)  # room for the model card, before any step
        checkpoint = start_run(self, resume_from_checkpoint)
        output = super().train(checkpoint, *args, **kwargs)
        self.write_constraint_report()
        self.create_model_card()
        return output

    def constraint_report(self) -> FeasibilityReport:
        """The feasibility report of the run so far (`PrimalDual.summary`), with the step and the noise scale."""
        return dataclasses.replace(
            self.primal_dual.summary(),
            global_step=self.state.global_step,
            noise_gamma=self.args.gamma_setting,  # the evaluation's ID / OOD boundary
            noise_sigma_x=self.noise_sigma,  # the scale every evaluation of this run's models should share
            noise_image_sigma_x=self.noise.image_sigma,
        )

    def write_constraint_report(self) -> FeasibilityReport:
        """Write `constraints.json` to `output_dir`; warn when constrained training ended infeasible (see [`verdict_message`])."""
        summary = self.constraint_report()
        if self.args.should_save:
            os.makedirs(self.output_folder, exist_ok=True)
            write_json(os.path.join(self.output_folder, REPORT), summary.to_dict())
        message = verdict_message(summary, self.args.dual_max)
        if message is not None and self.is_world_process_zero():
            level, text = message
            logger.log(level, "%s See %s.", text, os.path.join(self.output_folder, REPORT))
        return summary

    def write_model_card(self, folder: str, model_name: str | None = None, tags: list[str] | None = None) -> str:
        """The run's model card (`model_card.model_card`: the constraint table of the report so far) as `folder`'s
        README.md; the output folder's at every save and at the end, each checkpoint's as it is saved."""
        identity = self.run_identity
        card = model_card(
            self.constraint_report(),
            self.args,
            (identity.model if identity else None) or model_source(self.model),
            identity.data if identity else None,
            model_name or os.path.basename(os.path.normpath(self.output_folder)),
            [*(tags or []), *(getattr(unwrap_model(self.model), "model_tags", None) or [])],
        )
        output = os.path.normpath(folder) == os.path.normpath(self.output_folder)  # else a checkpoint's, new
        path = save_card(card, folder, record=output)
        if path != os.path.join(folder, CARD) and not getattr(self, "_told_card_beside", False):
            self._told_card_beside = True
            logger.warning(
                "%s is not the model card constrained-sft wrote there (a file of yours, or the card edited since): it "
                "is kept, and the run's card is %s beside it.",
                os.path.join(folder, CARD),
                path,
            )
        return path

    def init_hf_repo(self, token: str | None = None, private: bool | None = None) -> None:
        """transformers' hook that creates the Hub repository of `push_to_hub` (in the constructor, before training):
        a Hub that cannot be reached, or refuses the repository, is refused in one line naming `push_to_hub` instead
        of a traceback, and nothing trains."""
        try:
            return super().init_hf_repo(token, private)
        except Exception as error:  # the Hub client's errors vary with its HTTP library (connection, HTTP, offline)
            repo = self.args.hub_model_id or os.path.basename(os.path.normpath(self.output_folder))
            raise ValueError(
                f"`push_to_hub`: the Hub repository {repo!r} cannot be created ({type(error).__name__}: "
                f"{str(error).splitlines()[0][:160]}); log in (`huggingface-cli login`) and go online, or train without "
                "`push_to_hub`."
            ) from None

    def create_model_card(self, *args: Any, **kwargs: Any) -> None:
        """TRL's and transformers' hook (every checkpoint save, `push_to_hub`): this run's card in `output_dir`,
        which `push_to_hub` uploads with `constraints.json`. Both call it by keyword, with different signatures
        (TRL's `model_name, dataset_name, tags`; transformers' `language, license, tags, model_name, ...`): the
        card reads `model_name` and `tags`; transformers' card options are not used."""
        if args:
            raise TypeError("create_model_card takes keyword arguments (model_name=..., tags=...).")
        model_name, tags = kwargs.get("model_name"), kwargs.get("tags")
        if self.is_world_process_zero():
            os.makedirs(self.output_folder, exist_ok=True)
            self.write_model_card(self.output_folder, model_name, [tags] if isinstance(tags, str) else tags)
