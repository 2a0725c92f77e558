"""
Instruction sets for head-to-head generation, built from a recipe's own data: the first user turn of each held-out
conversation with the answer the data gives for it as the reference. Built reproducibly (the held-out split is the
recipe's: `dataset_seed`, `eval_size`), and disjoint from training by text: a held-out instruction whose exact text
also opens a training-pool row (ShareGPT repeats prompts such as "hi") is dropped and counted, so no instruction a
model is asked was ever trained on, with or without `max_train_samples`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .chat import DataArguments
from .errors import DataError
from .formats import to_trl_format
from .images import IMAGE_COLUMNS
from .splits import source_splits


def first_exchange(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """(instruction, reference answer) of a row in TRL's format (`to_trl_format` has checked its shape: the values
    are read as such): the last user message before the first answer, and that answer; None for a row without both
    (plain `text` rows, a prompt without a user turn)."""
    if "messages" in row:
        messages = row["messages"]
        answer = next((j for j, m in enumerate(messages) if m["role"] == "assistant" and m["content"].strip()), None)
        prompt, completion = (messages[:answer], messages[answer]["content"]) if answer is not None else ([], "")
    elif "prompt" in row:
        prompt, completion = row["prompt"], row["completion"]
        if isinstance(prompt, str):
            return (prompt, completion) if prompt.strip() else None
        completion = completion[0]["content"]
    else:
        return None
    users = [m["content"] for m in prompt if m["role"] == "user" and m["content"].strip()]
    return (users[-1], completion) if users else None


def held_out_instructions(args: DataArguments, limit: int | None = None) -> tuple[list[dict[str, str]], dict]:
    """
    (rows, counts): up to `limit` rows `{instruction, reference, dataset}` in held-out order, and how many held-out
    rows were dropped as repeats of a training-pool instruction, of each other, or for having no exchange.
    """
    pool, _, held_out = source_splits(args)
    if any(c in (held_out.column_names or []) for c in IMAGE_COLUMNS):
        raise DataError(
            f"`dataset_name` {args.dataset_name} has images: head-to-head instruction sets are text only (their "
            "answers are generated from the instruction alone); compare vision-language models by held-out loss."
        )
    pool = to_trl_format(pool, args.dataset_format, args.conversation_mode, "train")
    held_out = to_trl_format(held_out, args.dataset_format, args.conversation_mode, "held-out")
    trained = {pair[0].strip() for pair in map(first_exchange, pool) if pair}
    rows, seen = [], set()
    counts = {"held_out_rows": len(held_out), "in_training": 0, "repeated": 0, "no_exchange": 0}
    for row in held_out:
        pair = first_exchange(row)
        if pair is None:
            counts["no_exchange"] += 1
            continue
        key = pair[0].strip()
        if key in trained:
            counts["in_training"] += 1
        elif key in seen:
            counts["repeated"] += 1
        else:
            seen.add(key)
            rows.append({"instruction": pair[0], "reference": pair[1], "dataset": f"{args.dataset_name} (held out)"})
    if not rows:
        raise DataError(
            f"No held-out instruction of {args.dataset_name!r} is usable ({counts}); raise `eval_size` or give an "
            "instruction file."
        )
    counts["used"] = len(rows[:limit])
    return rows[:limit], counts
