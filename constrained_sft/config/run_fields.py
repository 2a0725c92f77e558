"""
What a run does with its output folder and with a step that goes non-finite (`RunArguments`, mixed into both trainer
configs), and the checks of the inherited `TrainingArguments` fields users set most, so that a wrong value is refused
naming the field before any work instead of failing inside PyTorch or transformers.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias, get_args

from ..constraints.variants import is_number
from ..utils.fields import check_fields
from ..utils.output_folders import OutputDirError, check_output_folder

if TYPE_CHECKING:  # the type checker reads the mixin as the arguments it is mixed into; at run time: `object`
    from transformers import TrainingArguments

    MixedInto = TrainingArguments
else:
    MixedInto = object

NonfinitePolicy: TypeAlias = Literal["stop", "skip"]
NONFINITE_POLICIES: tuple[NonfinitePolicy, ...] = get_args(NonfinitePolicy)
STRATEGIES = {"eval_strategy": ("no", "steps", "epoch"), "save_strategy": ("no", "steps", "epoch", "best")}
STRATEGIES["logging_strategy"] = STRATEGIES["eval_strategy"]


@dataclass
class RunArguments(MixedInto):
    """The run's output folder and its guard against non-finite steps (shared by every trainer config)."""

    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Train into an `output_dir` that holds another run's model or checkpoints (a run with other "
            "settings, or one without `run.json`): its checkpoints are removed before training, so a later resume "
            "cannot pick them up. Without it such a folder is refused before any work (transformers 5 dropped this "
            "field; constrained-sft defines it again). Rerunning the same settings into their own folder needs "
            "neither: it resumes from the newest complete checkpoint."
        },
    )
    nonfinite_steps: NonfinitePolicy = field(
        default="stop",
        metadata={
            "help": "An optimizer step whose objective f_L or gradient norm is NaN or inf: 'stop' ends training with an "
            "error naming the step (the model is not saved, the last checkpoint is untouched); 'skip' discards that "
            "step's gradients (no parameter moves, multipliers kept) with a warning, and counts it in "
            "constraints.json. Checked on values the dual step already brings to the host: no extra device sync."
        },
    )

    def _validate_run_arguments(self) -> None:
        check_fields(self, RunArguments)
        _check_inherited(self)
        output_dir = getattr(self, "output_dir", None)  # TrainingArguments' field
        if isinstance(output_dir, str):  # before any model or data is loaded: the config is built first
            check_output_folder(output_dir, "output_dir", OutputDirError)
        deepspeed_without_gpu(self)
        whole_sequences(self)
        no_liger(self)
        hub_reachable(self)


def no_liger(args: TrainingArguments) -> None:
    """`use_liger_kernel` refused before any work. Liger patches the model class: its forward becomes a fused linear
    cross-entropy (`lce_forward`) that skips the logits in training and knows none of TRL's fused-head arguments,
    which this package's evaluation passes, and its norms and MLPs become Triton kernels (GPU only); the constrained
    layers are read through the model's own final norm and LM head, which nobody has checked against Liger's."""
    if getattr(args, "use_liger_kernel", False):
        raise ValueError(
            "`use_liger_kernel` is not supported by constrained-sft yet: Liger replaces the model's forward with its "
            "fused linear cross-entropy and its norms with Triton kernels, and the constrained layers are read "
            "through the model's own final norm and LM head. Set `use_liger_kernel` false; the layers' readouts "
            "already sample `layer_loss_tokens` per sequence, and TRL's fused head (the default loss) keeps the last "
            "layer's logits out of memory."
        )


def hub_reachable(args: TrainingArguments) -> None:
    """`push_to_hub` with the Hub declared offline (HF_HUB_OFFLINE) is refused before any work: the push would fail
    after training. (An online Hub that cannot be reached is refused when the trainer creates the repository, also
    before training: `ConstrainedTrainerMixin.init_hf_repo`.)"""
    if not getattr(args, "push_to_hub", False):
        return
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise ValueError(
            "`push_to_hub` with the Hub offline (HF_HUB_OFFLINE=1): the push would fail after training; train "
            "without `push_to_hub` and upload the folder later (`huggingface-cli upload`), or go online."
        )


def _integer(args: object, name: str, low: int) -> None:
    value = getattr(args, name, None)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"`{name}` must be an integer >= {low}, got {value!r}.")


def _number(args: object, name: str, low: float, strict: bool = False) -> None:
    value = getattr(args, name, None)
    if not is_number(value) or not math.isfinite(value) or value < low or (strict and value == low):
        raise ValueError(f"`{name}` must be a finite number {'>' if strict else '>='} {low:g}, got {value!r}.")


def _check_inherited(args: TrainingArguments) -> None:
    """The inherited fields users set most, checked before `TrainingArguments.__post_init__` sees them."""
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
        _integer(args, name, 1)
    for name in ("learning_rate", "weight_decay", "max_grad_norm", "num_train_epochs"):
        _number(args, name, 0.0)
    steps = args.max_steps
    if not isinstance(steps, int) or isinstance(steps, bool) or (steps < 1 and steps != -1):
        raise ValueError(
            f"`max_steps` must be an integer >= 1, or -1 (the default: `num_train_epochs` decides), got {steps!r}."
        )
    if steps == -1 and not args.num_train_epochs > 0:
        raise ValueError(
            f"`num_train_epochs` must be > 0 when `max_steps` is -1 (the default), got {args.num_train_epochs!r}: "
            "nothing would be trained. Set `max_steps` >= 1 or `num_train_epochs` > 0."
        )
    if not isinstance(args.seed, int) or isinstance(args.seed, bool):
        raise ValueError(f"`seed` must be an integer, got {args.seed!r}.")
    for name in ("logging_steps", "save_steps", "eval_steps"):
        value = getattr(args, name, None)
        if value is not None:
            _number(args, name, 0.0, strict=True)
    for name, allowed in STRATEGIES.items():
        value = getattr(args, name, None)
        value = getattr(value, "value", value)  # an IntervalStrategy member
        if value not in allowed:
            raise ValueError(f"`{name}` must be one of {list(allowed)}, got {value!r}.")
    alpha = getattr(args, "neftune_noise_alpha", None)
    if alpha is not None:  # transformers' NEFTune: uniform noise of scale alpha / sqrt(L d) on the embeddings
        _number(args, "neftune_noise_alpha", 0.0)
    if hasattr(args, "max_length"):  # SFTConfig: the tokenized length sequences are truncated or packed to
        length = args.max_length
        if length is not None and (not isinstance(length, int) or isinstance(length, bool) or length < 1):
            raise ValueError(
                f"`max_length` must be an integer >= 1 (tokens), or None (no truncation), got {length!r}."
            )


def deepspeed_without_gpu(args: TrainingArguments) -> None:
    """
    Under `accelerate launch` with a DeepSpeed config on a machine without a GPU (DeepSpeed's CPU accelerator, as in
    this library's CI), accelerate turns DeepSpeed off when `use_cpu` is set, and otherwise starts no process group
    unless a backend is named: each rank would train alone and DeepSpeed fail on its batch-size check. gloo is the
    only CPU backend these packages ship, so it is chosen when none is named; `use_cpu` is refused.
    An FSDP launch without a GPU is refused: accelerate builds FSDP only on an accelerator, so without one each
    process would train alone (or, under `use_cpu`, as plain data parallelism), never sharded.
    """
    import torch

    if torch.cuda.is_available():
        return
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        raise ValueError(
            "FSDP needs a GPU: accelerate builds FSDP only on an accelerator, and without one each process would "
            "train alone. On CPUs, launch with accelerate_configs/deepspeed_zero3.yaml (DeepSpeed's CPU accelerator, "
            "with `--use_cpu false`) or plain data parallelism (`--multi_gpu` with `use_cpu`)."
        )
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() != "true":
        return
    if args.use_cpu:
        raise ValueError(
            "`use_cpu` is true under a DeepSpeed launch: accelerate turns DeepSpeed off for it. Without a GPU, pass "
            "`--use_cpu false` (DeepSpeed's CPU accelerator trains on the CPU, over gloo), or launch without DeepSpeed."
        )
    if args.ddp_backend is None:
        args.ddp_backend = "gloo"
    elif args.ddp_backend != "gloo":
        raise ValueError(f"`ddp_backend` must be 'gloo' for DeepSpeed without a GPU, got {args.ddp_backend!r}.")


def whole_sequences(args: TrainingArguments) -> None:
    """
    Refuse context and sequence parallelism before any work. Both split every sequence across ranks, and transformers
    then hands the loss pre-shifted `shift_labels` chunks: the layers' losses (and a classifier's pooled token) are
    read on whole sequences, so each rank would score a different piece of a sequence. The request comes from
    `parallelism_config`, or under `accelerate launch` from the accelerate config's `parallelism_config` section,
    which accelerate reads from the environment (read here by accelerate's own `ParallelismConfig`).
    """
    config = getattr(args, "parallelism_config", None)
    if config is None and os.environ.get("ACCELERATE_USE_PARALLELISM_CONFIG", "false").lower() == "true":
        from accelerate.parallelism_config import ParallelismConfig

        try:
            config = ParallelismConfig()
        except ValueError:
            return  # an inconsistent accelerate config: accelerate names its own fields when the trainer starts
        where = "the accelerate config's `parallelism_config`"
    else:
        where = "`parallelism_config`"
    split = {name: getattr(config, name, 1) for name in ("cp_size", "sp_size")}
    asked = [f"{name}={size}" for name, size in split.items() if isinstance(size, int) and size > 1]
    if asked:
        raise ValueError(
            f"{where} asks for context / sequence parallelism ({', '.join(asked)}), which splits every sequence "
            "across ranks; constrained-sft reads each layer's loss on whole sequences and does not support it yet. "
            "Set `cp_size` and `sp_size` to 1; for long sequences use DeepSpeed ZeRO-3 or FSDP2 with "
            "`gradient_checkpointing`."
        )


@contextlib.contextmanager
def clearer_precision_error():
    """transformers refuses bf16 / fp16 without a GPU that has it in words that name no field; name them."""
    try:
        yield
    except ValueError as error:
        if "bf16/gpu" not in str(error) and "fp16" not in str(error):
            raise
        raise ValueError(
            "`bf16` / `fp16` is on (SFTConfig's default is `bf16: true`) but this machine has no GPU that supports "
            "it: pass `--bf16 false --use_cpu true` to train on the CPU (in fp32), or run on a GPU."
        ) from None
