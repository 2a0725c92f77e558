"""Datasets of the shipped offline tasks, and IFEval's scoring re-exported for `offline_ifeval.yaml`."""

from __future__ import annotations

import json

from datasets import Dataset, DatasetDict
from lm_eval.tasks.ifeval.utils import agg_inst_level_acc, process_results

from constrained_sft.data.classification import rotten_tomatoes as rotten_tomatoes_splits
from constrained_sft.utils.shipped import package_data

__all__ = ["agg_inst_level_acc", "instructions", "process_results", "rotten_tomatoes"]


def rotten_tomatoes(size: int = 200, **_) -> DatasetDict:
    """The first `size` held-out snippets (movies never in `pkg:rotten-tomatoes`' training split), both labels."""
    test = rotten_tomatoes_splits()["test"]
    return DatasetDict({"test": test.select(range(min(size, len(test))))})


def instructions(**_) -> DatasetDict:
    """The prompts of `offline_ifeval.jsonl`, in IFEval's columns (key, prompt, instruction_id_list, kwargs)."""
    path = package_data("evaluation", "harness", "tasks", "offline_ifeval.jsonl")
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return DatasetDict({"train": Dataset.from_list(rows)})
