"""`ConstrainedTrainer`: a `transformers.Trainer` for sequence classifiers whose every layer must reduce the loss."""

from __future__ import annotations

from collections import defaultdict
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from transformers import Trainer
from transformers.modeling_outputs import SequenceClassifierOutput

from ..config import ConstrainedConfig
from ..constraints import LayerLosses
from ..readout import ClassifierReadout, ReadoutError
from ..utils import unwrap_model
from .mixin import BatchScore, ConstrainedTrainerMixin, constrained_args


class ConstrainedTrainer(ConstrainedTrainerMixin, Trainer):
    """
    A drop-in for `transformers.Trainer` on single-label sequence classification. f_l is the mean cross-entropy of
    layer l's hidden states read out through the model's own head ([`ClassifierReadout`]); the Lagrangian, dual
    step, noise, logging, checkpoints and feasibility report are those of `ConstrainedSFTTrainer`.

    Gradient accumulation: classification heads in transformers 5 take `**kwargs` but ignore `num_items_in_batch`,
    which makes `Trainer` skip its division by the accumulation steps (transformers issue #47688). This trainer sets
    `model_accepts_loss_kwargs = False`, so both the objective and the constraint terms are per-micro-batch means
    divided by the accumulation steps.
    """

    def __init__(
        self,
        model,
        args: ConstrainedConfig | None = None,
        *rest: Any,
        readout: ClassifierReadout | None = None,
        **kwargs,
    ) -> None:
        if args is None:
            args = ConstrainedConfig(output_dir=f"{type(unwrap_model(model)).__name__}-Constrained")
        else:
            args = constrained_args(args, ConstrainedConfig, type(self).__name__)
        super().__init__(model, args, *rest, **kwargs)
        base = unwrap_model(self.model)
        config = base.config
        if config.num_labels < 2 or config.problem_type in ("regression", "multi_label_classification"):
            raise ValueError(
                f"ConstrainedTrainer trains single-label classifiers (`num_labels` >= 2, `problem_type` None or "
                f"'single_label_classification'); {type(base).__name__} has num_labels={config.num_labels}, "
                f"problem_type={config.problem_type!r}."
            )
        self.readout = readout if readout is not None else ClassifierReadout.from_model(base)
        self.num_layers = config.num_hidden_layers
        self.model_accepts_loss_kwargs = False
        self._init_constraints(self.num_layers)
        self._accuracy: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self._verified = False

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        noise = self._noise(model, inputs)
        labels = inputs.get("labels")
        with noise:
            loss, outputs = super().compute_loss(
                model,
                {**inputs, "output_hidden_states": True},
                return_outputs=True,
                num_items_in_batch=num_items_in_batch,
            )
        if labels is not None:
            losses = self._layer_losses(outputs, labels, inputs.get("attention_mask"))
            loss = self._add_constraints(loss, losses, num_items_in_batch)
            correct = torch.stack([(outputs.logits.argmax(-1) == labels).sum(), labels.new_tensor(labels.numel())])
            mode = "train" if self.model.training else "eval"
            self._accuracy[mode] = [
                a + b for a, b in zip(self._accuracy[mode], self._reduce(correct).tolist(), strict=True)
            ]
        outputs = SequenceClassifierOutput(loss=outputs.loss, logits=outputs.logits)  # hidden states stay in the step
        return (loss, outputs) if return_outputs else loss

    def _layer_losses(self, outputs, labels: torch.Tensor, mask: torch.Tensor | None) -> LayerLosses:
        """Per-example cross-entropy of every constrained layer: sums `[n]`, per-example `[n, B]`."""
        hidden = outputs.hidden_states
        if hidden is None or len(hidden) != self.num_layers + 1:
            raise ReadoutError(
                f"Expected {self.num_layers + 1} hidden states from the encoder, got "
                f"{None if hidden is None else len(hidden)}."
            )
        if not self._verified and not self.model.training:
            self._verify(hidden[-1], outputs.logits, mask)
        grad = self._constraints_active()
        with nullcontext() if grad else torch.no_grad():
            logits = [
                outputs.logits if layer == self.num_layers else self.readout(hidden[layer], mask)
                for layer in self.primal_dual.spec.layers
            ]
            nll = torch.stack([F.cross_entropy(x.float(), labels, reduction="none") for x in logits])  # [n, B]
        B = labels.numel()
        return LayerLosses(
            sums=nll.sum(1),
            per_sequence=nll.detach(),
            num_tokens=labels.new_tensor(B),
            segment_tokens=torch.ones(B, dtype=torch.long, device=labels.device),
        )

    @torch.no_grad()
    def _verify(self, last_hidden: torch.Tensor, logits: torch.Tensor, mask: torch.Tensor | None) -> None:
        """Once, without dropout: the readout of the last layer must reproduce the model's own logits."""
        ours = self.readout(last_hidden, mask)
        if not torch.allclose(ours.float(), logits.float(), rtol=1e-4, atol=1e-4):
            raise ReadoutError(
                f"The readout of the last layer does not reproduce the model's logits (max difference "
                f"{(ours - logits).abs().max().item():.3g}); pass `readout=ClassifierReadout(head=...)`."
            )
        self._verified = True

    @torch.no_grad()
    def score_batch(self, inputs: dict[str, Any]) -> BatchScore:
        """One held-out batch through the training code path: accuracy, cross-entropy, every constrained layer."""
        self.model.eval()
        inputs = self._prepare_inputs(inputs)
        inputs.pop("noise_gamma", None)
        labels = inputs["labels"]
        with self.compute_loss_context_manager():
            out = self.model(**inputs, output_hidden_states=True)
        hits = out.logits.argmax(-1) == labels
        return BatchScore(
            correct=hits.sum().item(),
            count=labels.numel(),
            nll=F.cross_entropy(out.logits.float(), labels, reduction="sum").item(),
            layers=self._layer_losses(out, labels, inputs.get("attention_mask")),
            hits=hits.cpu(),
        )

    def _reset_eval_statistics(self) -> None:
        super()._reset_eval_statistics()
        self._accuracy.pop("eval", None)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        correct, total = self._accuracy.pop(mode, [0.0, 0.0])
        if total:
            logs["accuracy" if mode == "train" else f"{getattr(self, '_eval_prefix', 'eval')}_accuracy"] = (
                correct / total
            )
        super().log(logs, start_time)
