"""
The guard against training into a NaN model: once per optimizer step, before `optimizer.step()`, the step's gradient
norm and measured layer losses (brought to the host together with the dual step's statistics, so no extra device
sync) must be finite. `nonfinite_steps: stop` (the default) ends training with [`NonFiniteStepError`]; `skip` drops
the step's gradients (a torch optimizer leaves a parameter without a gradient untouched) with a warning.
"""

from __future__ import annotations

import logging
import os

from .checkpoints import checkpoint_problem, checkpoints

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
