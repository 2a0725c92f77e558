"""
Chat / instruction data formats mapped to what TRL trains on, every row validated (errors name the split, row and
problem). Formats (detected from the columns with `dataset_format="auto"`):

- `alpaca`: instruction, input (optional), output -> conversational prompt / completion (the chat template applies);
- `sharegpt`: conversations = [{from, value}] -> messages (or the first exchange as prompt / completion);
- `messages`: messages = [{role, content}];
- `prompt_completion`: prompt, completion (strings or conversational lists);
- `text`: a text column (plain language modelling).

A row of the wrong shape (a missing column, a value of the wrong type, an unknown role) is refused, naming the split,
row and field. A well-formed row with no answer to learn from is skipped and counted, in every chat format: real
conversation data holds unanswered exchanges (ShareGPT: two user turns in a row, an empty reply), and a dozen such rows
must not stop a run on eleven thousand. "No answer" is, by format and mode: `first_turn`, no non-empty assistant turn
right after the opening user turn(s) (the first exchange); `messages`, no non-empty assistant turn anywhere; Alpaca, an
empty `output`; prompt / completion, an empty completion. Plain `text` rows have no answer to miss: an empty text is
refused like any malformed row. A map-style split says how many rows it skipped and why (one warning per reason); a
streamed one warns for each row it skips, as training reads it; a split left with no row is refused.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Literal, TypeAlias, get_args

from datasets import Dataset, IterableDataset

from ..utils.types import JSONRead
from .errors import DataError
from .images import check_placeholders, content_text, row_images, undecoded, with_image_feature
from .splits import SOURCE_ROW

logger = logging.getLogger(__name__)

DatasetFormat: TypeAlias = Literal["auto", "alpaca", "sharegpt", "messages", "prompt_completion", "text"]
FORMATS: tuple[DatasetFormat, ...] = get_args(DatasetFormat)
ConversationMode: TypeAlias = Literal["messages", "first_turn"]
CONVERSATION_MODES: tuple[ConversationMode, ...] = get_args(ConversationMode)
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


class NoAnswer(Exception):
    """A well-formed row with no answer to learn from (see the module docstring): skipped and counted, not refused."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


NO_ANSWER_FIRST_EXCHANGE = "no answer in the first exchange"
NO_ANSWER_CONVERSATION = "no non-empty assistant turn to learn from"
SKIPPED = "__no_answer__"  # a streamed row's mark while it is filtered out


REQUIRED = {
    "alpaca": ("instruction", "output"),
    "sharegpt": ("conversations",),
    "messages": ("messages",),
    "prompt_completion": ("prompt", "completion"),
    "text": ("text",),
}


def to_trl_format(
    ds,
    fmt: str,
    conversation_mode: str = "messages",
    split: str = "train",
    source: str | None = None,
    image_root: str | None = None,
):
    """Validate every row and map the dataset to TRL's formats; errors name the source (`source`: e.g. "`dataset_name`
    data.json"), the split, the row (and its row in the source where a shuffle or carve moved it) and the problem. A
    streamed dataset is mapped lazily: its first row names the columns, and each row is checked as training reads
    it. Rows with images (`images` / `image`) keep them as `images`, checked (`data.images`; relative paths from
    `image_root`)."""
    origin = f"{source}: " if source else ""
    columns, first = ds.column_names, None
    if isinstance(ds, IterableDataset) and columns is None:
        first = next(iter(ds), None)
        if first is None:
            raise DataError(f"The {split} split is empty.")
        columns = list(first)
    columns = [c for c in columns if c != SOURCE_ROW]
    fmt = detect_format(columns) if fmt == "auto" else fmt
    missing = [c for c in REQUIRED[fmt] if c not in columns]
    if missing:
        raise DataError(
            f"{origin}The {split} split has no column {missing} required by format {fmt!r}; it has {columns}."
        )
    convert = with_images(CONVERTERS[fmt], image_root)
    unit = "conversations" if fmt in ("sharegpt", "messages") else "rows"
    if isinstance(ds, IterableDataset):

        def checked(row: dict, i: int, warn: bool = True) -> dict:
            try:
                return {**convert(row, conversation_mode), SKIPPED: False}
            except NoAnswer as skip:
                if warn:
                    logger.warning("%s row %d (%s format, streamed): skipped: %s.", split, i, fmt, skip.reason)
                return {SKIPPED: True}
            except DataError as e:
                raise DataError(f"{origin}{split} row {i} ({fmt} format, streamed): {e}") from None

        if first is not None:
            checked(first, 0, warn=False)  # the first row, read already: its problem before any training
        kept = ds.map(checked, with_indices=True, remove_columns=columns).filter(lambda r: not r[SKIPPED])
        return kept.remove_columns([SKIPPED])  # streamed images stay as read: paths or decoded images
    rows: list[dict] = []
    skipped: Counter[str] = Counter()
    for i, row in enumerate(undecoded(ds)):
        try:
            rows.append(convert(row, conversation_mode))
        except NoAnswer as skip:
            skipped[skip.reason] += 1
        except DataError as e:
            at = row.get(SOURCE_ROW, i)
            moved = f"; the source split's row {at}" if at != i else ""
            raise DataError(f"{origin}{split} row {i} ({fmt} format{moved}): {e}") from None
    if not rows and skipped:
        raise DataError(
            f"The {split} split has no row to learn from: all {len(ds):,} {unit} were skipped "
            f"({'; '.join(f'{n:,}: {reason}' for reason, n in skipped.items())})."
        )
    if not rows:
        raise DataError(f"The {split} split is empty.")
    for reason, n in skipped.items():
        logger.warning("%s split: skipped %s of %s %s: %s.", split, f"{n:,}", f"{len(ds):,}", unit, reason)
    return with_image_feature(Dataset.from_list(rows))


def with_images(convert: Converter, root: str | None) -> Converter:
    """`convert`, keeping a row's images (`images` / `image`) as `images`, checked against its placeholders."""

    def converted(row: JSONRead, mode: str) -> JSONRead:
        out = convert(row, mode)
        images = row_images(row, root)
        if images is not None:
            check_placeholders(out, images)
            out["images"] = images
        return out

    return converted


def rows_with_answers(
    rows: list[dict], fmt: str = "auto", conversation_mode: str = "messages"
) -> tuple[list[dict], int]:
    """(the rows that train, how many were skipped for having no answer) of raw rows in `fmt`, by the rule above;
    a malformed row is refused (`DataError`)."""
    fmt = detect_format(list(rows[0])) if fmt == "auto" and rows else fmt
    convert = CONVERTERS[fmt]
    kept = []
    for i, row in enumerate(rows):
        try:
            convert(row, conversation_mode)
        except NoAnswer:
            continue
        except DataError as e:
            raise DataError(f"row {i} ({fmt} format): {e}") from None
        kept.append(row)
    return kept, len(rows) - len(kept)


def _string(row: dict, key: str, allow_empty: bool = False) -> str:
    value = row.get(key)
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise DataError(f"`{key}` must be a non-empty string, got {value!r:.80}.")
    return value


def _alpaca(row: JSONRead, _mode: str) -> JSONRead:
    instruction, output = _string(row, "instruction"), _string(row, "output", allow_empty=True)
    if not output.strip():
        raise NoAnswer("an empty `output`")
    extra = row.get("input") or ""
    if not isinstance(extra, str):
        raise DataError(f"`input` must be a string, got {extra!r:.80}.")
    prompt = f"{instruction}\n\n{extra}" if extra.strip() else instruction
    return {"prompt": [{"role": "user", "content": prompt}], "completion": [{"role": "assistant", "content": output}]}


def _sharegpt(row: JSONRead, mode: str) -> JSONRead:
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


def _messages(row: JSONRead, mode: str) -> JSONRead:
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages or not all(is_message(m) for m in messages):
        raise DataError(
            f"`messages` must be a non-empty list of {{role, content}}, content a string or a list of parts "
            f"{{type: text or image}}, got {messages!r:.80}."
        )
    if mode == "first_turn":
        exchange = first_turn_exchange(messages)
        if exchange is None:
            raise NoAnswer(NO_ANSWER_FIRST_EXCHANGE)
        return {"prompt": exchange[:-1], "completion": exchange[-1:]}
    if not any(m["role"] == "assistant" and content_text(m["content"]).strip() for m in messages):
        raise NoAnswer(NO_ANSWER_CONVERSATION)
    return {"messages": messages}


def is_message(m: object) -> bool:
    """A {role, content} message whose content is a string or a list of multimodal parts (`images.content_text`)."""
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        return False
    try:
        content_text(m.get("content"))
    except DataError:
        return False
    return True


def first_turn_exchange(messages: list[JSONRead]) -> list[JSONRead] | None:
    """The conversation's first exchange as `first_turn` trains on it: the opening system / user turns and the first
    assistant turn after them; None when that turn is missing or empty, or no user turn opens the conversation
    (`messages`: {role, content} dicts)."""
    answer = next((j for j, m in enumerate(messages) if m["role"] == "assistant"), None)
    if answer is None or not content_text(messages[answer]["content"]).strip():
        return None
    if not any(m["role"] == "user" and asks(m["content"]) for m in messages[:answer]):
        return None
    return messages[: answer + 1]


def asks(content: object) -> bool:
    """Whether a user turn asks something: non-empty text, or an image."""
    parts = content if isinstance(content, list) else []
    return bool(content_text(content).strip()) or any(p["type"] == "image" for p in parts)


def _prompt_completion(row: JSONRead, _mode: str) -> JSONRead:
    prompt, completion = row.get("prompt"), row.get("completion")
    if isinstance(prompt, str) and isinstance(completion, str):
        if not completion.strip():
            raise NoAnswer("an empty completion")
        return {"prompt": prompt, "completion": completion}
    if isinstance(prompt, list) and isinstance(completion, list) and completion:
        try:
            _messages({"messages": prompt + completion}, "messages")  # the shape of every message
        except NoAnswer:
            raise NoAnswer("an empty completion") from None
        if not any(m["role"] == "assistant" and content_text(m["content"]).strip() for m in completion):
            raise NoAnswer("an empty completion")
        return {"prompt": prompt, "completion": completion}
    raise DataError(
        f"`prompt` / `completion` must both be strings or both message lists, got {prompt!r:.60} / {completion!r:.60}."
    )


def _text(row: JSONRead, _mode: str) -> JSONRead:
    return {"text": _string(row, "text")}


Converter: TypeAlias = Callable[[JSONRead, str], JSONRead]
# `dataset_format` -> its converter: a closed, read-only table (a format is a row shape TRL trains on, not a plug-in;
# the field's choices are its keys)
CONVERTERS: Mapping[str, Converter] = MappingProxyType(
    {
        "alpaca": _alpaca,
        "sharegpt": _sharegpt,
        "messages": _messages,
        "prompt_completion": _prompt_completion,
        "text": _text,
    }
)
