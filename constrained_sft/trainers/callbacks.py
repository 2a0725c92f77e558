"""
The trainers' callbacks, and what they run: the dual step once per optimizer step (`DualStepCallback`), the
non-finite guard it applies, and the compact console that replaces transformers' log printers.

The guard against training into a NaN model: once per optimizer step, before `optimizer.step()`, the step's gradient
norm and measured layer losses (brought to the host together with the dual step's statistics, so no extra device
sync) must be finite. `nonfinite_steps: stop` (the default) ends training with [`NonFiniteStepError`]; `skip` drops
the step's gradients (a torch optimizer leaves a parameter without a gradient untouched) with a warning.
"""

from __future__ import annotations

import logging
import math
import os
from typing import TYPE_CHECKING

from transformers import PrinterCallback, ProgressCallback, TrainerCallback

from .console import CompactConsole
from .resume.select import checkpoint_problem, checkpoints

if TYPE_CHECKING:  # what transformers hands every callback
    from transformers import TrainerControl, TrainerState, TrainingArguments

logger = logging.getLogger(__name__)


class NonFiniteStepError(ValueError):
    """An optimizer step whose objective or gradient is NaN or inf, with `nonfinite_steps: stop`."""


def nonfinite_message(step: int, grad_norm: float | None, metrics: dict[str, float], output_dir: str) -> str:
    """What went non-finite at optimizer step `step` (1-based), what was kept, and what to do."""
    losses = {k.split("/", 1)[1]: round(v, 4) for k, v in metrics.items() if k.startswith("layer_loss/")}
    newest = next((p for _, p in checkpoints(output_dir) if checkpoint_problem(p) is None), None)
    kept = f"the newest complete checkpoint, {newest}, is untouched" if newest else "no checkpoint had been written"
    return (
        f"Training stopped at optimizer step {step}: the gradient norm is {grad_norm} and the layer losses are "
        f"{losses or 'not measured'} (not finite). The step was not applied and no model was saved to {output_dir}; "
        f"{kept}. Usual causes: NaN or inf in the inputs or labels, a learning rate too large, fp16 overflow. "
        "`nonfinite_steps: skip` skips such steps instead (each one warned and counted)."
    )


def handle_nonfinite(trainer, metrics: dict[str, float], grad_norm: float | None) -> None:
    """
    Raise (policy 'stop') or drop this step's gradients with a warning (policy 'skip'). A global batch without a
    supervised token (`metrics` empty: its loss is 0 / 0) has nothing to learn from and is skipped under either policy.
    """
    step = trainer.state.global_step + 1
    if trainer.args.nonfinite_steps == "stop" and metrics:
        raise NonFiniteStepError(nonfinite_message(step, grad_norm, metrics, os.path.abspath(trainer.args.output_dir)))
    trainer.model.zero_grad(set_to_none=True)
    trainer.primal_dual.nonfinite_steps += 1
    if trainer.is_world_process_zero():
        logger.warning(
            "Skipped optimizer step %d (%s): gradient norm %s; parameters and multipliers kept (%d such steps so far).",
            step,
            "`nonfinite_steps: skip`" if metrics else "no supervised token in the global batch",
            grad_norm,
            trainer.primal_dual.nonfinite_steps,
        )


class DualStepCallback(TrainerCallback):
    """
    Runs once all gradient-accumulation micro-batches of an optimizer step have run (and the gradients are clipped),
    just before `optimizer.step()`, on every rank: the dual step, and the non-finite guard that may stop training or
    drop the step's gradients before the parameters move.
    """

    def __init__(self, trainer) -> None:
        self.trainer = trainer

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        self.trainer.dual_step()

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, train_dataloader=None, **kwargs
    ):
        """`constraint_warmup_epochs` in optimizer steps, now that the epoch length is known."""
        epochs = getattr(args, "constraint_warmup_epochs", 0)
        if epochs and train_dataloader is not None:
            per_epoch = max(math.ceil(len(train_dataloader) / args.gradient_accumulation_steps), 1)
            pd = self.trainer.primal_dual
            pd.warmup_steps = max(getattr(args, "constraint_warmup_steps", 0), epochs * per_epoch)

    def on_epoch_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        """Resilience restarts: u = 0 when an epoch after the first starts (not when a run resumes inside one)."""
        if getattr(args, "resilience_restarts", False) and state.epoch and float(state.epoch).is_integer():
            self.trainer.primal_dual.dual.reset_relaxation()


class CompactProgressCallback(ProgressCallback):
    """transformers' progress bar, with compact lines instead of the log dict."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.console = CompactConsole()

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None and logs:
            for line in self.console.lines(logs, state.global_step, state.max_steps):
                self.training_bar.write(line)


class CompactPrinterCallback(PrinterCallback):
    """transformers' printer (`disable_tqdm=True`), with compact lines instead of the log dict."""

    def __init__(self) -> None:
        self.console = CompactConsole()

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs=None, **kwargs):
        if state.is_local_process_zero and logs:
            for line in self.console.lines(logs, state.global_step, state.max_steps):
                print(line)


def use_compact_console(trainer) -> None:
    """Swap the trainer's log printers (progress bar or plain printer) for the compact ones."""
    for plain, compact in ((ProgressCallback, CompactProgressCallback), (PrinterCallback, CompactPrinterCallback)):
        found = trainer.callback_handler.pop_callback(plain)
        if found is not None and not isinstance(found, compact):
            trainer.add_callback(compact)
        elif found is not None:
            trainer.add_callback(found)
