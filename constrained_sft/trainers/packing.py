"""
Packed and padding-free batches under the constraints: what TRL's packing does to the documents the layer losses,
the readout sample and the noise are taken per, and the two places where that would go wrong, guarded here.

- **Documents are told apart by `position_ids`** (restarting at 0): `readout.tokens.segment_ids` gives each
  document its own per-layer losses, its own `layer_loss_tokens` sample and its own noise rows, and transformers'
  attention keeps the documents of a packed row apart: flash attention through the collator's `cu_seq_lens`, eager /
  sdpa / flex attention through the block-diagonal mask `masking_utils` builds from `position_ids` when a batch has no
  `attention_mask` (padding-free). An attention function without such a mask (a user-registered one, paged
  attention) would let documents attend to each other: refused before training (`check_isolation`). What isolation
  costs differs: eager and sdpa apply one dense mask over the whole flattened row (16 x 512 tokens: an 8192 x 8192
  mask), computing attention across documents and masking it, so a packed step cost 1.7-2.2x a padded one on an H200
  (`docs/guides/performance.md`); flash and flex attention compute each document alone.
- **Answerless documents**: unpacked, TRL truncates each row to `max_length` and drops the rows left with no
  supervised token (a prompt that fills `max_length`); packed, it truncates inside the packer and keeps them, so they
  take token slots and carry no loss (14% of ShareGPT's first exchanges at 512 tokens: 20% of the packed tokens,
  `benchmarks/results/padding_waste_sharegpt.json`). `prepare_packed` prepares rows as unpacked training does (the
  same truncation, the same drop) and packs what is left, so packed and unpacked runs train on the same documents.

A document longer than `max_length`: with `packing_strategy="bfd"` (the default), its first `max_length` tokens are
kept and its tail is dropped, as unpacked training truncates (`truncation_mode`); `bfd_split` packs the tail as a
document of its own, read without its beginning; `wrapped` ignores document boundaries (rows are cut from the stream,
documents attend to each other, and a row is one sequence for the statistics).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..utils.fields import mapping_field

if TYPE_CHECKING:  # TRL's config, whose fields decide the packing
    from trl import SFTConfig

logger = logging.getLogger(__name__)

# Attention implementations that keep the documents of a padding-free row apart (transformers 5.x): the mask
# interface (`masking_utils.ALL_MASK_ATTENTION_FUNCTIONS`) builds a packed-sequence mask for eager / sdpa / flex, and
# the flash kernels read `cu_seq_lens`.
ISOLATING = ("sdpa", "eager", "flex_attention", "flash_attention_2", "flash_attention_3", "flash_attention_4")


def padding_free(args: SFTConfig) -> bool:
    """Whether TRL flattens each batch into one row of documents (as `SFTTrainer.__init__` decides)."""
    return bool(args.padding_free or (args.packing and args.packing_strategy in {"bfd", "bfd_split"}))


def skips_preparation(args: SFTConfig) -> bool:
    """Whether TRL leaves the dataset as given (`dataset_kwargs: {skip_prepare_dataset: true}`)."""
    return bool(mapping_field(args.dataset_kwargs, "dataset_kwargs").get("skip_prepare_dataset"))


def isolates(implementation: str | None) -> bool:
    """Whether `implementation` keeps padding-free documents apart (hub kernels named after flash attention do)."""
    if implementation is None:
        return True  # transformers' default for the model: sdpa or eager
    name = implementation.split(":")[0].split("@")[0]
    return name in ISOLATING or (name.startswith("kernels-") or "/" in name) and "flash" in name


CUDA_ONLY = ("flash_attention_2", "flash_attention_3", "flash_attention_4")  # their kernels run on CUDA devices only


def hub_kernel(name: str) -> bool:
    """Whether `name` names a Hub kernel (`kernels-community/flash-attn`, `repo@rev:fn`): transformers' own test where
    it has one."""
    from transformers.integrations import hub_kernels

    is_kernel = getattr(hub_kernels, "is_kernel", None)
    return bool(is_kernel(name)) if is_kernel is not None else "/" in name.split(":")[0]


def on_cpu(args: SFTConfig) -> bool:
    """Whether the run trains on the CPU (asked, or no CUDA device)."""
    import torch

    return bool(args.use_cpu) or not torch.cuda.is_available()


def attention_problem(implementation: str | None, args: SFTConfig) -> tuple[str, str] | None:
    """(why training with `implementation` would fail at its first step, or at the model's load with a traceback, or
    let packed documents attend to each other; what to use instead), None where it runs. Asked before any work
    (`check_attention`)."""
    if implementation is None:
        return None
    name = implementation.split(":")[0].split("@")[0]
    cpu = on_cpu(args)
    here = "sdpa, eager" if cpu else ", ".join(ISOLATING)
    if hub_kernel(implementation):
        from transformers.utils import is_kernels_available

        if not is_kernels_available():
            return (
                "is a Hub kernel, which needs the `kernels` package (pip install kernels) and the Hub or its cache",
                here,
            )
        if cpu:
            return "is a Hub kernel (CUDA code), and this run trains on the CPU", here
    if cpu and name in CUDA_ONLY:
        return "runs on CUDA devices only, and this run trains on the CPU", here
    if cpu and name == "flex_attention":
        return "has no backward pass on the CPU (torch's FlexAttention), and this run trains on the CPU", here
    if padding_free(args) and not isolates(implementation):
        return (
            "cannot keep packed documents apart (no packed-sequence mask, no `cu_seq_lens`)",
            f"{here}, or set `packing=False` and `padding_free=False`",
        )
    return None


def check_attention(implementation: str | None, args: SFTConfig) -> None:
    """`attention_problem`'s refusal, naming `attn_implementation` and what to use instead, before any work."""
    if found := attention_problem(implementation, args):
        problem, instead = found
        raise ValueError(f"`attn_implementation` {implementation!r} {problem}. Use one of {instead}.")


def check_isolation(model: object, args: SFTConfig) -> None:
    """`check_attention` for a model as loaded (its text config's attention implementation): padding-free or packed
    training where the attention cannot keep the documents apart is refused (their tokens would attend across
    documents: every per-document loss contaminated), and so is an attention that cannot run here."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config
    check_attention(getattr(text, "_attn_implementation", None), args)


def prepare_rows(prepare, dataset, processing_class, args: SFTConfig, formatting_func, dataset_name: str):
    """`prepare` (TRL's `_prepare_dataset`) unpacked, with a line saying how many rows it left out: truncated to
    `max_length`, a row whose prompt fills it has no supervised token, and TRL drops it silently."""
    rows = prepare(dataset, processing_class, args, False, formatting_func, dataset_name)
    skipped = skips_preparation(args)
    if hasattr(dataset, "__len__") and hasattr(rows, "__len__") and len(rows) < len(dataset) and not skipped:
        logger.warning(
            f"{dataset_name} dataset: {len(dataset) - len(rows)} of {len(dataset)} rows have no supervised token in "
            f"their first {args.max_length} tokens (their prompt fills `max_length`) and are left out."
        )
    return rows


def prepare_packed(prepare, dataset, processing_class, args: SFTConfig, formatting_func, dataset_name: str):
    """
    `prepare` (TRL's `_prepare_dataset`) for bfd packing: the rows prepared unpacked (`prepare_rows`: tokenized,
    labelled, truncated to `max_length` by `truncation_mode`, the rows left without a supervised token dropped), then
    packed. Where no row is dropped this packs exactly what TRL's own packed preparation packs (bfd truncates at
    `max_length` too); `bfd_split`, `wrapped` and streamed datasets go to `prepare` as they are.
    """
    from datasets import Dataset
    from trl.data_utils import pack_dataset

    skipped = skips_preparation(args)
    if args.packing_strategy != "bfd" or not isinstance(dataset, Dataset) or args.max_length is None or skipped:
        return prepare(dataset, processing_class, args, True, formatting_func, dataset_name)
    shuffle = args.shuffle_dataset
    args.shuffle_dataset = False  # shuffled once, below, before packing (as TRL does)
    try:
        rows = prepare_rows(prepare, dataset, processing_class, args, formatting_func, dataset_name)
    finally:
        args.shuffle_dataset = shuffle
    map_kwargs = {"num_proc": args.dataset_num_proc, "desc": f"Packing {dataset_name} dataset"}
    rows = rows.select_columns(["input_ids", "labels"])
    if shuffle:
        rows = rows.shuffle(seed=args.seed)
    packed = pack_dataset(rows, args.max_length, args.packing_strategy, map_kwargs)
    return packed.shuffle(seed=args.seed) if shuffle else packed
