"""
`ConstrainedTrainer`: a `transformers.Trainer` whose every layer must reduce the loss, for any model that honours the
readout contract: its forward takes `output_hidden_states=True` and returns `loss`, `logits` (its predictions) and
`hidden_states` (h_0, ..., h_L), and a shared readout psi maps any h_l to predictions of the same kind, scored by a
per-example loss (`readout.losses`: cross-entropy for classes, squared error for real-valued targets). Sequence
classifiers (their own head, the paper's shared linear readout, the UT) and the video denoisers (DUST, video UT, ViT;
squared error on pixels) are instances of it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

import torch
from datasets import Dataset, IterableDataset
from transformers import Trainer, TrainingArguments
from transformers.modeling_outputs import SequenceClassifierOutput

from ..config import ConstrainedConfig
from ..constraints import LayerLosses, PrimalDual
from ..readout import ClassifierReadout, FunctionLoss, ReadoutError, ReadoutLoss, readout_loss
from ..utils.modules import unwrap_model
from ..utils.types import Batch
from .constrained import BatchScore, ConstrainedTrainerMixin
from .resume import prepare_inputs
from .setup import ConstrainedSetup, building, constrained_args

logger = logging.getLogger(__name__)


class ConstrainedTrainer(ConstrainedTrainerMixin, Trainer):
    """
    A drop-in for `transformers.Trainer`. f_l is the mean per-example `loss` of layer l's hidden states read out by
    `readout` (default: the model's own `readout(hidden, attention_mask)` method or classification head, see
    [`ClassifierReadout`]); the Lagrangian, dual step, noise, logging, checkpoints and feasibility report are those
    of `ConstrainedSFTTrainer`.

    Args:
        readout (`ClassifierReadout`, *optional*): psi, for a model whose head is not found automatically.
        loss (`str`, `ReadoutLoss` or callable, *optional*): `'cross_entropy'`, `'squared_error'`, a `ReadoutLoss`
            (which says what targets it takes and whether accuracy is reported) or a function `(predictions,
            targets) -> [B]` (targets unchecked, no accuracy); default from the model's config: squared error for
            `problem_type='regression'` or `num_labels=1`, cross-entropy otherwise (multi-label is refused).
        num_layers (`int`, *optional*): L, for a model without `config.num_hidden_layers`.
        primal_dual (`PrimalDual`, *optional*): the constrained problem and its dual optimizer, built by hand; it
            replaces what the config's constraint fields would build.

    Gradient accumulation: classification heads in transformers 5 take `**kwargs` but ignore `num_items_in_batch`,
    which makes `Trainer` skip its division by the accumulation steps (transformers issue #47688). This trainer sets
    `model_accepts_loss_kwargs = False`, so both the objective and the constraint terms are per-micro-batch means
    divided by the accumulation steps.
    """

    def __init__(
        self,
        model,
        args: TrainingArguments | None = None,  # a plain one is converted (`setup.constrained_args`)
        *rest: Any,
        readout: ClassifierReadout | None = None,
        loss=None,
        num_layers: int | None = None,
        primal_dual: PrimalDual | None = None,
        **kwargs,
    ) -> None:
        def default() -> ConstrainedConfig:  # transformers' default output folder, named after the model
            return ConstrainedConfig(output_dir=f"{type(unwrap_model(model)).__name__}-Constrained")

        checked = constrained_args(args, ConstrainedConfig, type(self).__name__, default)
        datasets = {name: kwargs.get(name) for name in ("train_dataset", "eval_dataset")}
        with building(self, checked, model, datasets):
            super().__init__(model, checked, *rest, **kwargs)
            base = unwrap_model(self.model)
            config = getattr(base, "config", None)
            if loss is None:
                loss = _default_loss(base, config)
            self.readout_loss = readout_loss(loss)
            if isinstance(self.readout_loss, FunctionLoss):
                logger.info(
                    "`loss` %s is a function: its targets are not checked and no accuracy is logged; pass a "
                    "ReadoutLoss subclass to declare them.",
                    self.readout_loss.name,
                )
            self.readout = readout if readout is not None else ClassifierReadout.from_model(base)
            layers = num_layers if num_layers is not None else getattr(config, "num_hidden_layers", None)
            if not isinstance(layers, int) or layers < 1:
                raise ValueError(
                    f"`num_layers`: {type(base).__name__} has no `config.num_hidden_layers`; pass num_layers=L, the "
                    "number of layers whose outputs `hidden_states` holds after the input (an integer >= 1)."
                )
            self.num_layers: int = layers
            self.model_accepts_loss_kwargs = False
            num_labels = getattr(config, "num_labels", None)
            for name, dataset in (("train_dataset", self.train_dataset), ("eval_dataset", self.eval_dataset)):
                check_labels(dataset, name, self.readout_loss, num_labels)
            if any(streamed(d) for d in (self.train_dataset, self.eval_dataset)):  # read only batch by batch
                self.data_collator = LabelCheck(self.data_collator, self.readout_loss, num_labels)
            self.setup = ConstrainedSetup(self, self.num_layers, primal_dual)
            self._accuracy: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
            self._verified = False

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        noise = self.noise.for_forward(model, inputs, self.model.training)
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
            if self.readout_loss.reports_accuracy:
                hits = (outputs["logits"].argmax(-1) == labels).sum()
                correct = torch.stack([hits, labels.new_tensor(labels.numel())])
                mode = "train" if self.model.training else "eval"
                self._accuracy[mode] = [
                    a + b for a, b in zip(self._accuracy[mode], self._reduce(correct).tolist(), strict=True)
                ]
        # the hidden states stay in the step
        outputs = SequenceClassifierOutput(loss=outputs.get("loss"), logits=outputs.get("logits"))
        return (loss, outputs) if return_outputs else loss

    def _layer_losses(self, outputs, labels: torch.Tensor, mask: torch.Tensor | None) -> LayerLosses:
        """Per-example loss of every constrained layer: sums `[n]`, per-example `[n, B]`."""
        hidden, predictions = outputs.get("hidden_states"), outputs.get("logits")
        if hidden is None or len(hidden) != self.num_layers + 1:
            raise ReadoutError(
                f"Expected {self.num_layers + 1} hidden states from the encoder, got "
                f"{None if hidden is None else len(hidden)}."
            )
        if not self._verified and not self.model.training:
            self._verify(hidden[-1], predictions, mask)
        grad = self._constraints_active()
        with nullcontext() if grad else torch.no_grad():
            per_layer = [
                predictions if layer == self.num_layers else self.readout(hidden[layer], mask)
                for layer in self.primal_dual.spec.layers
            ]
            nll = torch.stack([self.readout_loss(x, labels) for x in per_layer])  # [n, B]
        B = labels.shape[0]
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
    def score_batch(self, inputs: Batch) -> BatchScore:
        """
        One held-out batch through the training code path: per example the final layer's loss (`loss`, this trainer's
        per-example loss), `count` = 1 and, where the loss reports accuracy, the top-1 hit (`correct`); every
        constrained layer.
        """
        self.model.eval()
        inputs = prepare_inputs(self, inputs)
        inputs.pop("noise_gamma", None)
        labels = inputs["labels"]
        with self.compute_loss_context_manager():
            out = self.model(**inputs, output_hidden_states=True)
        examples = {
            "count": torch.ones(labels.shape[0], dtype=torch.float64, device=labels.device),
            "loss": self.readout_loss(out.logits, labels).double(),
        }
        if self.readout_loss.reports_accuracy:
            examples["correct"] = (out.logits.argmax(-1) == labels).double()
        return BatchScore(examples=examples, layers=self._layer_losses(out, labels, inputs.get("attention_mask")))

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


def streamed(dataset) -> bool:
    """Whether `dataset` (or one of a dict's) is read only by iterating (a `datasets.IterableDataset`)."""
    if isinstance(dataset, dict):
        return any(streamed(d) for d in dataset.values())
    return isinstance(dataset, IterableDataset)


def check_labels(dataset, name: str, loss: ReadoutLoss, num_labels: int | None) -> None:
    """
    The `labels` column of a `datasets.Dataset` (one Arrow column read, no rows decoded) against the loss's
    `target_problem`: class ids in 0..num_labels-1 for cross-entropy, finite numbers for squared error, whatever a
    `ReadoutLoss` of one's own declares. A bad target is refused naming the dataset, the row and the allowed values,
    before training, instead of failing (or training to NaN) at its step. A streamed dataset cannot be read ahead: its
    batches are checked as they are collated (`LabelCheck`).
    """
    if isinstance(dataset, dict):
        for key, part in dataset.items():
            check_labels(part, f"{name}[{key!r}]", loss, num_labels)
        return
    if not isinstance(dataset, Dataset) or "labels" not in dataset.column_names:
        return
    found = bad_targets(dataset.with_format("torch")["labels"], loss, num_labels)
    if found is not None:
        row, labels, allowed, count = found
        raise ValueError(
            f"`{name}` row {row}: `labels` {labels} — labels must be {allowed}; {count} of {len(dataset)} rows are not."
        )


def bad_targets(labels, loss: ReadoutLoss, num_labels: int | None) -> tuple[int, list, str, int] | None:
    """(first bad row, its labels, what is allowed, how many rows are bad) for `labels` `[N, ...]` against the loss's
    `target_problem`; None when every row is fine or the loss checks nothing."""
    values = torch.as_tensor(labels).reshape(len(labels), -1).double()
    problem = loss.target_problem(values, num_labels)
    if problem is None or not bool(problem[0].any()):
        return None
    bad, allowed = problem
    row = int(bad.nonzero()[0])
    return row, values[row].tolist(), allowed, int(bad.sum())


class LabelCheck:
    """
    A data collator that checks each collated batch's `labels` as `check_labels` checks a whole map-style dataset,
    on the host before the batch reaches the device (no device sync): the check of a streamed dataset, whose rows are
    seen only batch by batch. The error names the batch row.
    """

    def __init__(self, collator, loss: ReadoutLoss, num_labels: int | None) -> None:
        self.collator, self.loss, self.num_labels = collator, loss, num_labels

    def __call__(self, examples):
        batch = self.collator(examples)
        labels = batch.get("labels") if isinstance(batch, Mapping) else None  # a dict, or a BatchEncoding
        if labels is None:
            return batch
        found = bad_targets(labels, self.loss, self.num_labels)
        if found is not None:
            row, values, allowed, _ = found
            raise ValueError(f"streamed data, a batch's row {row}: `labels` {values} — labels must be {allowed}.")
        return batch


def _default_loss(base, config) -> str:
    """The loss the model's config implies; a model without one must name it."""
    if config is None:
        raise ValueError(
            f"`loss`: {type(base).__name__} has no config to tell its task from; pass loss='cross_entropy' (class "
            "labels), 'squared_error' (real-valued targets) or a callable (predictions, targets) -> [B]."
        )
    problem = getattr(config, "problem_type", None)
    if problem == "multi_label_classification":
        raise ValueError(
            f"ConstrainedTrainer does not train multi-label classifiers (`problem_type` None, "
            f"'single_label_classification' or 'regression'); {type(base).__name__} has problem_type={problem!r}."
        )
    if problem == "regression" or getattr(config, "num_labels", 2) == 1:
        return "squared_error"
    return "cross_entropy"
