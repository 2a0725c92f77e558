"""`ConstrainedSFTTrainer`: TRL's `SFTTrainer` whose every layer must reduce the loss."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from datasets import Dataset
from transformers import TrainingArguments
from trl import SFTConfig, SFTTrainer
from trl.trainer.utils import compute_flops_per_token, get_config_model_id

from ..config import ConstrainedSFTConfig
from ..constraints import LayerLosses, PrimalDual
from ..noise.modality import placeholder_ids
from ..readout import CausalLMReadout, LayerProbe, ProbeRequest, ReadoutError, select_tokens
from ..utils.fields import mapping_field
from ..utils.modules import model_text_config, unwrap_model
from ..utils.types import Batch
from .constrained import BatchScore, ConstrainedTrainerMixin
from .packing import check_attention, check_isolation, prepare_packed, prepare_rows, skips_preparation
from .resume import prepare_inputs
from .setup import ConstrainedSetup, building, constrained_args


def batch_shape(labels: torch.Tensor) -> tuple[int, int]:
    """(B, T) of a batch's `labels` `[B, T]`."""
    return int(labels.shape[0]), int(labels.shape[1])


def _flops_per_token(config, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward) by TRL's estimate, or 6 x parameters when it cannot tell."""
    try:
        return float(compute_flops_per_token(config, seq_len))
    except (AttributeError, TypeError, ValueError):
        return 6.0 * config.num_hidden_layers * 12 * config.hidden_size**2


def auto_tokens_per_sequence(
    config, head_shape: tuple[int, int], readouts: int, batch_shape: tuple[int, int], sequences: int, budget: float
) -> int:
    """
    Tokens per sequence so that `readouts` intermediate readouts cost `budget` of the batch's training FLOPs, each
    token read costing 6 x D x V (`head_shape` = (V, D)): k = budget x flops_per_token x B x T / (readouts x 6DV x
    sequences), at least 1. SmolLM2-135M at 4 x 256 gets 4, Llama 3.1 8B at 4 x 512 gets 24.
    """
    B, T = batch_shape
    per_token = 6 * head_shape[0] * head_shape[1]
    total = budget * _flops_per_token(config, T) * B * T / (readouts * per_token)
    return max(1, int(total // max(sequences, 1)))


def model_positions(config) -> int | None:
    """The model's number of positions (`max_position_embeddings` / `n_positions`), None where it has no such bound."""
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return positions if isinstance(positions, int) else None


def longest_row(dataset) -> int | None:
    """
    The longest tokenized row of a map-style dataset, read with Arrow compute on its `input_ids` column (the selected
    rows only, never as Python lists: the performance guide's "Data checks and streaming"); None where that
    cannot be known without reading the data (a streamed `IterableDataset`, untokenized rows): those are checked per
    batch (`check_batch_positions`).
    """
    if not isinstance(dataset, Dataset) or "input_ids" not in dataset.column_names or not len(dataset):
        return None
    import pyarrow.compute as pc

    column = dataset.select_columns(["input_ids"]).with_format("arrow")[:]["input_ids"]  # Arrow, no Python objects
    return int(pc.max(pc.list_value_length(column)).as_py() or 0)  # list_value_length: [N] int32


def _positions_error(args: ConstrainedSFTConfig, longest: int, positions: int) -> ValueError:
    return ValueError(
        f"`max_length` {args.max_length} lets training sequences of {longest} tokens through, but the model has "
        f"{positions} positions (`max_position_embeddings`); set `max_length` <= {positions}."
    )


def check_positions(dataset, args: ConstrainedSFTConfig, positions: int | None) -> None:
    """
    Refuse, naming `max_length`, training sequences longer than the model's positions (learned position embeddings
    fail with an IndexError at the first such batch; rotary ones run past the context they were trained on): packed
    rows are `max_length` long, unpacked ones as long as their longest tokenized row (`longest_row`). A streamed
    dataset is checked batch by batch instead, with the same error (`check_batch_positions`). `positions`: the
    model's (`model_positions`).
    """
    if positions is None or dataset is None:
        return
    longest = args.max_length if args.packing else longest_row(dataset)
    if longest is not None and longest > positions:
        raise _positions_error(args, longest, positions)


def check_batch_positions(inputs: Batch, args: ConstrainedSFTConfig, positions: int | None) -> None:
    """`check_positions` for one batch (`input_ids` `[B, T]`: T is its longest sequence), before its forward."""
    ids = inputs.get("input_ids")
    if positions is None or ids is None:
        return
    longest = ids.shape[-1]
    if "position_ids" in inputs and ids.shape[0] == 1:  # padding-free: documents side by side in one row
        given = inputs.get("max_length_q")  # flash-attention's packed-batch keyword, an int
        longest = int(given) if given else int(inputs["position_ids"].max()) + 1
    if longest > positions:
        raise _positions_error(args, longest, positions)


TRL_FIELDS = ("messages", "prompt", "input_ids")  # besides `dataset_text_field`: what TRL's preparation reads


def checked_stream(dataset, args: ConstrainedSFTConfig, name: str = "train_dataset"):
    """
    A streamed dataset (`IterableDataset`, whose rows TRL reads only during training) checked row by row as it is
    read: a row with none of the fields TRL prepares (`dataset_text_field`, `messages`, `prompt` + `completion`,
    `input_ids`) or with an empty text (nothing to predict) is refused naming `name`, the row and the field, instead
    of TRL's KeyError or an IndexError inside the layer losses. The first row is checked here, before training.
    """
    from datasets import IterableDataset

    if not isinstance(dataset, IterableDataset) or skips_preparation(args):
        return dataset
    field = args.dataset_text_field

    def check(row: dict, i: int) -> dict:
        if not any(k in row for k in (field, *TRL_FIELDS)):
            raise ValueError(
                f"`{name}` row {i} (streamed) has no field TRL trains on: `{field}` (`dataset_text_field`), "
                f"`messages`, `prompt` + `completion` or `input_ids`; it has {sorted(row)}."
            )
        text = row.get(field)
        if isinstance(text, str) and not text.strip() and not any(k in row for k in TRL_FIELDS):
            raise ValueError(
                f"`{name}` row {i} (streamed): `{field}` is empty, so it has no token to predict; give each row a "
                "non-empty text (or filter the stream first)."
            )
        return row

    first = next(iter(dataset), None)
    if first is not None:
        check(first, 0)
    return dataset.map(check, with_indices=True)


def check_model_id(model_id: str, args: ConstrainedSFTConfig) -> None:
    """A model given by path or id, before TRL loads it: the attention it would load with (`packing.check_attention`),
    and the class TRL would load (its config's first architecture), refused naming it where that class cannot
    generate (a sequence classifier, a bare base model without LM head). A class transformers does not know (remote
    code) is left to TRL."""
    import transformers

    init = mapping_field(args.model_init_kwargs, "model_init_kwargs")
    check_attention(init.get("attn_implementation"), args)
    try:
        config = transformers.AutoConfig.from_pretrained(
            model_id, trust_remote_code=init.get("trust_remote_code", False)
        )
    except (OSError, ValueError):
        return  # TRL's own load names the problem
    name = (config.architectures or [None])[0]
    cls = getattr(transformers, name, None) if name else None
    if cls is not None and not issubclass(cls, transformers.GenerationMixin):
        raise ReadoutError(
            f"`model` {model_id}: a saved {name}, which has no LM head to generate with; ConstrainedSFTTrainer trains "
            "causal language models (*ForCausalLM). Give one, or train a classifier with ConstrainedTrainer."
        )


class ConstrainedSFTTrainer(ConstrainedTrainerMixin, SFTTrainer):
    """
    A drop-in for [`trl.SFTTrainer`] (same arguments, plus an optional `readout`) that trains

        min f_L   s.t.   f_l <= (1 - alpha_l) f_{l-1}  (consecutive constrained layers),   f_first <= epsilon

    by primal-dual learning: the primal optimizer minimises f_L + sum_l lambda_l g_l, and after each optimizer step
    the multipliers ascend on the global-batch slack. f_l is the next-token loss of layer l read out through the
    model's final norm and LM head. With `constraints="none"` it trains exactly like `SFTTrainer` and only measures.

    Args:
        readout (`CausalLMReadout`, *optional*):
            How to read out a layer, for architectures whose final norm or LM head is not found automatically.
        primal_dual (`PrimalDual`, *optional*):
            The constrained problem and its dual optimizer, built by hand (e.g. a `DualOptimizer` subclass of one's
            own); it replaces what the config's constraint fields would build.
    """

    _tag_names, _name = ["trl", "sft", "constrained-sft"], "ConstrainedSFT"
    args: ConstrainedSFTConfig  # `__init__` converts any other arguments into one

    def __init__(
        self,
        model,
        args: TrainingArguments | None = None,  # a plain one (or an SFTConfig) is converted
        *rest: Any,
        readout: CausalLMReadout | None = None,
        primal_dual: PrimalDual | None = None,
        **kwargs,
    ) -> None:
        def default() -> ConstrainedSFTConfig:  # TRL's default output folder, named after the model
            name = model if isinstance(model, str) else get_config_model_id(model.config)
            return ConstrainedSFTConfig(f"{name.split('/')[-1]}-ConstrainedSFT")

        checked = constrained_args(args, ConstrainedSFTConfig, type(self).__name__, default)
        for name in ("train_dataset", "eval_dataset"):
            if name in kwargs:
                kwargs[name] = checked_stream(kwargs[name], checked, name)
        datasets = {name: kwargs.get(name) for name in ("train_dataset", "eval_dataset")}
        with building(self, checked, model, datasets):
            if isinstance(model, str):
                check_model_id(model, checked)
            elif not hasattr(model, "generation_config"):
                raise ReadoutError(
                    f"`model`: ConstrainedSFTTrainer trains causal language models; {type(model).__name__} has no LM "
                    "head (no `generation_config`). Load it with AutoModelForCausalLM, or train a classifier with "
                    "ConstrainedTrainer."
                )
            if not isinstance(model, str):
                check_isolation(model, checked)
            super().__init__(model, checked, *rest, **kwargs)
            check_isolation(self.model, checked)  # a model TRL loaded from its name
            base = unwrap_model(self.model)
            text_config = model_text_config(base)
            self._positions = model_positions(text_config)
            check_positions(self.train_dataset, checked, self._positions)
            self.readout = readout if readout is not None else CausalLMReadout.from_model(base)
            self._placeholders = placeholder_ids(base)  # a VLM's image tokens: not read as the layers' targets
            self._sample_sizes: dict[tuple, int] = {}  # per batch shape
            num_layers = text_config.num_hidden_layers
            self.setup = ConstrainedSetup(self, num_layers, primal_dual)
            sharded = self.is_deepspeed_enabled or self.is_fsdp_enabled  # the head may be gathered per readout call
            self.probe = LayerProbe(
                self.readout, self.primal_dual.spec.layers, num_layers, checked.readout_final_norm, sharded=sharded
            )
            self.probe.attach(base)
            self._rows_bound = self._shared_rows_bound()
            # the model may outlive this trainer (or be handed to another): its forward is restored when the trainer
            # goes, or at `detach_probe()`
            self._detach_probe = weakref.finalize(self, self.probe.detach, base)

    def prepare_dataset(self, prepare, dataset, processing_class, args: SFTConfig, packing, formatting_func, name):
        """TRL's preparation (`prepare`, its `_prepare_dataset`) saying which rows it leaves out; packed, the documents
        unpacked training trains on (`trainers.packing`)."""
        if not packing:
            return prepare_rows(prepare, dataset, processing_class, args, formatting_func, name)
        return prepare_packed(prepare, dataset, processing_class, args, formatting_func, name)

    def detach_probe(self) -> None:
        """Give the model back its own forward (idempotent); the trainer cannot train or evaluate afterwards."""
        self._detach_probe()

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        check_batch_positions(inputs, self.args, self._positions)  # a shape read: streamed rows are seen only here
        noise = self.noise.for_forward(model, inputs, self.model.training)  # pops `noise_gamma` (not a model input)
        request = self._probe_request(inputs)
        with noise, self.probe.serving(unwrap_model(model), request):
            result = super().compute_loss(
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )
        loss, outputs = result if return_outputs else (result, None)
        if request is not None:
            loss = self._add_constraints(loss, self._measured(request), num_items_in_batch)
        return (loss, outputs) if return_outputs else loss

    @torch.no_grad()
    def score_batch(self, inputs: Batch) -> BatchScore:
        """
        One held-out batch through the training code path (readout, probe, and any active embedding noise): per
        sequence (row) the final layer's correct top-1 tokens, supervised tokens and summed NLL, and every measured
        layer's losses.
        """
        self.model.eval()
        inputs = prepare_inputs(self, inputs)
        inputs.pop("noise_gamma", None)
        request = self._probe_request(inputs)
        if request is None:
            raise ValueError("A held-out batch without `labels` cannot be scored: give the evaluation data labels.")
        with self.compute_loss_context_manager(), self.probe.serving(unwrap_model(self.model), request):
            out = self.model(**inputs, use_cache=False, fused_lm_head=True)
        # TRL's fused head: `[B, T-1]` per shifted position, zero where the label is masked
        examples = {
            "correct": out.is_top1.sum(-1).double(),
            "count": out.label_mask.sum(-1).double(),
            "loss": -out.log_probs.double().sum(-1),
        }
        return BatchScore(examples=examples, layers=self._measured(request))

    def _measured(self, request: ProbeRequest) -> LayerLosses:
        """The layers' losses the probe measured in the forward; an error if the forward never reached the probe."""
        if request.result is None:
            raise ReadoutError(
                f"The constrained layers were not measured: {type(unwrap_model(self.model)).__name__}'s forward no "
                "longer goes through this trainer's probe (something replaced `model.forward` after the trainer was "
                "built). Build the trainer after that change, or call `trainer.probe.attach(model)` again."
            )
        return request.result

    def _sample_size(self, labels: torch.Tensor, position_ids: torch.Tensor | None) -> int | None:
        """Tokens per sequence for the intermediate readouts: `layer_loss_tokens`, or with 'auto' the budgeted k."""
        k = self.args.layer_loss_tokens
        if k is None or isinstance(k, int):
            return k
        readouts = len(self.probe.below)
        if readouts == 0:
            return None
        sequences = labels.shape[0] if position_ids is None else max(1, int(position_ids.eq(0).sum()))
        key = (tuple(labels.shape), sequences, readouts)
        if key not in self._sample_sizes:  # a few batch shapes per run; TRL's FLOP estimate is Python work
            self._sample_sizes[key] = self._auto_tokens(readouts, batch_shape(labels), sequences)
        return self._sample_sizes[key]

    def _auto_tokens(self, readouts: int, batch_shape: tuple[int, int], sequences: int) -> int:
        """The 'auto' k for a batch shape (see `auto_tokens_per_sequence`), with this model's head and budget."""
        config = model_text_config(self.model)
        head = self.readout.head_shape
        return auto_tokens_per_sequence(config, head, readouts, batch_shape, sequences, self.args.readout_budget)

    def _probe_request(self, inputs: Batch) -> ProbeRequest | None:
        labels = inputs.get("labels")
        if labels is None:
            return None
        if "shift_labels" in inputs:
            # context / sequence parallelism is refused with the config (`whole_sequences`); this is a collator
            raise NotImplementedError(
                "The batch carries pre-shifted `shift_labels` (a collator that shifts labels itself): "
                "ConstrainedSFTTrainer reads the layers at the positions of unshifted `labels` and does not support "
                "pre-shifted ones yet. Use a collator that returns `labels` only (TRL's default does)."
            )
        # Training reads a sample when `layer_loss_tokens` asks for one; evaluation always reads every token.
        sample = self._sample_size(labels, inputs.get("position_ids")) if self.model.training else None
        seed, first_row = self.noise.row_stream("tokens", labels.shape[0]) if sample is not None else (0, 0)
        selection = select_tokens(labels, inputs.get("position_ids"), sample, seed, first_row, self._placeholders)
        bound = self._rows_bound if sample is not None and inputs.get("position_ids") is None else None
        return ProbeRequest(
            selection=selection, grad=self._constraints_active(), shape=batch_shape(labels), max_rows=bound
        )

    def _shared_rows_bound(self) -> int | None:
        """
        An upper bound on a training sample's rows that every rank computes alike from the config alone (no
        collective): unpacked rows hold B <= `per_device_train_batch_size` sequences of T <= `max_length` tokens,
        and K = B x k, or B x T when k >= T - 1 (the layers are then read whole), with k non-decreasing in T (the
        'auto' k grows with the per-token FLOPs), so K <= B_max x min(k(max_length) + 1, max_length). None without
        `max_length` (a sequence has no length bound).
        """
        T, B, k = self.args.max_length, self.args.per_device_train_batch_size, self.args.layer_loss_tokens
        if T is None or T < 2 or k is None:
            return None
        per_sequence = k if isinstance(k, int) else self._auto_tokens(max(len(self.probe.below), 1), (B, T), B)
        return B * min(per_sequence + 1, T)
