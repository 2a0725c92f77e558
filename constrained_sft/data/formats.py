"""
Chat / instruction data formats mapped to what TRL trains on, every row validated (errors name the split, row and
problem). Formats (detected from the columns with `dataset_format="auto"`):

- `alpaca`: instruction, input (optional), output -> conversational prompt / completion (the chat template applies);
- `sharegpt`: conversations = [{from, value}] -> messages (or the first exchange as prompt / completion);
- `messages`: messages = [{role, content}];
- `prompt_completion`: prompt, completion (strings or conversational lists);
- `text`: a text column (plain language modelling).
"""

from __future__ import annotations

from datasets import Dataset, IterableDataset

from .errors import DataError

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
    columns, first = ds.column_names, None
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

        if first is not None:
            checked(first, 0)  # the first row, read already: its problem before any training
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
