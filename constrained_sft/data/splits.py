"""
Which rows train and which are held out: the source's own held-out split, or a reproducible carve-off of the training
split (map-style: seeded; streamed: the stream's first rows), and row subsampling.
"""

from __future__ import annotations

from datasets import Dataset, IterableDataset

from ..utils.types import JSONObject
from .errors import DataError
from .sources import SourceFields, load_source

SOURCE_ROW = "__source_row__"  # each map-style row's index in its source split, for errors that name the file's row


def numbered(ds: Dataset) -> Dataset:
    """`ds` with each row's index in it (`SOURCE_ROW`), kept through shuffles and carves (an int64 column)."""
    import numpy as np

    return ds if SOURCE_ROW in ds.column_names else ds.add_column(SOURCE_ROW, np.arange(len(ds)))


def carve(ds: Dataset, size: float, seed: int, field: str) -> tuple[Dataset, Dataset]:
    """(rest, carved): `size` rows (a fraction in (0, 1) or a row count) split off `ds` with `seed`, reproducibly;
    `field` is the setting `size` came from, named when the rows are too few."""
    rows = int(size) if size >= 1 else size
    if len(ds) < 2 or (isinstance(rows, int) and rows >= len(ds)):
        raise DataError(f"Cannot carve {rows} rows from {len(ds)} training rows; lower `{field}`.")
    parts = ds.train_test_split(test_size=rows, seed=seed, shuffle=True)
    return parts["train"], parts["test"]


def source_splits(args: SourceFields) -> tuple[Dataset, Dataset, Dataset]:
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
    pool = numbered(pool)
    if test_name is None:
        pool, held_out = carve(pool, args.eval_size, args.dataset_seed, "eval_size")
    else:
        held_out = numbered(source[test_name])
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


def carve_stream(args: SourceFields, pool: IterableDataset, test: IterableDataset | None, features=None):
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


def _streamed_splits(args: SourceFields, pool: IterableDataset, test: IterableDataset | None):
    """`source_splits` of a stream: the held-out rows are read into memory (`carve_stream`); the training rows stay
    a stream (its first `max_train_samples` rows if set)."""
    held_out, pool = carve_stream(args, pool, test)
    train = pool if args.max_train_samples is None else pool.take(args.max_train_samples)
    return pool, train, held_out


def describe_split(args: SourceFields) -> JSONObject:
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


def refuse_streamed_selection(args: SourceFields) -> None:
    """Model selection (a sweep) carves its validation rows off the training rows: not from a stream."""
    if getattr(args, "streaming", False):
        raise DataError(
            "`streaming` is not supported for model selection (a sweep carves its validation rows off the training "
            "rows, which a stream cannot do reproducibly); sweep on a map-style sample (`streaming: false` with "
            "`max_train_samples`), then train the chosen configuration streamed."
        )
