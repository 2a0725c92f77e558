"""Chat data: a well-formed row with no answer to learn from is skipped and counted in every chat format, map-style
and streamed; a malformed row is still refused in one line naming it (`data.formats`)."""

import logging

import pytest
from datasets import Dataset, IterableDataset

from constrained_sft.data import DataError
from constrained_sft.data.formats import rows_with_answers, to_trl_format


def human(text):
    return {"from": "human", "value": text}


def gpt(text):
    return {"from": "gpt", "value": text}


ANSWERED = {"conversations": [human("s1 ="), gpt("s2")]}
SHAREGPT = [
    ANSWERED,
    {"conversations": [human("s1 ="), human("s3 =")]},  # two user turns, no answer (a cut ShareGPT row)
    {"conversations": [human("s1 ="), gpt(" "), human("s4 ="), gpt("s5")]},  # an empty reply opens it
    {"conversations": [human("s1 ="), human("s3 ="), gpt("s4")]},  # two user turns, then the answer: trains
    {"conversations": [gpt("s1"), human("s2 ="), gpt("s3")]},  # no user turn before the first answer
]


def test_first_turn_skips_conversations_without_an_answer_and_says_how_many(caplog):
    with caplog.at_level(logging.WARNING, "constrained_sft.data.formats"):
        out = to_trl_format(Dataset.from_list(SHAREGPT * 3), "auto", "first_turn")
    assert len(out) == 6
    assert out[1]["prompt"] == [{"role": "user", "content": "s1 ="}, {"role": "user", "content": "s3 ="}]
    assert out[1]["completion"] == [{"role": "assistant", "content": "s4"}]
    assert "train split: skipped 9 of 15 conversations: no answer in the first exchange." in caplog.text


def test_whole_conversations_skip_only_those_without_any_answer(caplog):
    with caplog.at_level(logging.WARNING, "constrained_sft.data.formats"):
        out = to_trl_format(Dataset.from_list(SHAREGPT), "sharegpt", "messages", "held-out")
    assert len(out) == 4  # the empty reply is followed by an answer: the conversation trains
    assert "held-out split: skipped 1 of 5 conversations: no non-empty assistant turn to learn from." in caplog.text


@pytest.mark.parametrize(
    ("fmt", "rows", "reason"),
    [
        ("alpaca", [{"instruction": "a", "output": "b"}, {"instruction": "a", "output": "  "}], "an empty `output`"),
        (
            "prompt_completion",
            [{"prompt": "a", "completion": "b"}, {"prompt": "a", "completion": ""}],
            "an empty completion",
        ),  # fmt: skip
        (
            "prompt_completion",
            [
                {"prompt": [{"role": "user", "content": "a"}], "completion": [{"role": "assistant", "content": "b"}]},
                {"prompt": [{"role": "user", "content": "a"}], "completion": [{"role": "assistant", "content": " "}]},
            ],
            "an empty completion",
        ),  # fmt: skip
        (
            "messages",
            [
                {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
                {"messages": [{"role": "user", "content": "a"}]},
            ],
            "no non-empty assistant turn",
        ),  # fmt: skip
    ],
)
def test_every_chat_format_skips_rows_without_an_answer(caplog, fmt, rows, reason):
    with caplog.at_level(logging.WARNING, "constrained_sft.data.formats"):
        out = to_trl_format(Dataset.from_list(rows), fmt)
    assert len(out) == 1 and "skipped 1 of 2 " in caplog.text and reason in caplog.text


@pytest.mark.parametrize(
    ("fmt", "row", "message"),
    [
        ("sharegpt", {"conversations": "hi"}, r"train row 1 \(sharegpt format\): `conversations` must be"),
        ("sharegpt", {"conversations": [human("a"), {"from": "robot", "value": "b"}]}, r"train row 1 .*turn 1 must"),
        ("sharegpt", {"conversations": [human("a"), {"from": "gpt", "value": 3}]}, r"train row 1 .*turn 1 must"),
        ("alpaca", {"instruction": "a", "output": None}, r"train row 1 \(alpaca format\): `output` must be"),
        ("text", {"text": " "}, r"train row 1 \(text format\): `text` must be a non-empty string"),
    ],
)
def test_malformed_rows_are_still_refused_naming_the_row(fmt, row, message):
    good = {"sharegpt": ANSWERED, "alpaca": {"instruction": "a", "output": "b"}, "text": {"text": "a"}}[fmt]
    try:
        data = Dataset.from_list([good, row])
    except Exception:  # a value Arrow cannot hold beside the good row's: the same rule on the raw rows
        with pytest.raises(DataError, match=message.replace("train row", "row")):
            rows_with_answers([good, row], fmt, "first_turn")
        return
    with pytest.raises(DataError, match=message):
        to_trl_format(data, fmt, "first_turn")


def test_a_split_with_no_answer_at_all_is_refused():
    with pytest.raises(DataError, match=r"no row to learn from: all 2 conversations were skipped \(2: no answer"):
        to_trl_format(Dataset.from_list(SHAREGPT[1:3]), "sharegpt", "first_turn")


def test_a_stream_skips_rows_without_an_answer_as_it_reads_them(caplog):
    stream = IterableDataset.from_generator(lambda: iter(SHAREGPT))
    with caplog.at_level(logging.WARNING, "constrained_sft.data.formats"):
        out = list(to_trl_format(stream, "auto", "first_turn"))
    assert [r["completion"][0]["content"] for r in out] == ["s2", "s4"]
    assert "train row 1 (sharegpt format, streamed): skipped: no answer in the first exchange." in caplog.text
    assert "train row 4 (sharegpt format, streamed): skipped" in caplog.text


def test_a_streamed_prompt_completion_row_without_a_completion_is_skipped_not_refused(caplog):
    """(The bad-input matrix refused it before the rule: an empty completion is a row with no answer.)"""
    rows = [{"prompt": f"s{i} =", "completion": f" s{i + 1}"} for i in range(4)] + [{"prompt": "a", "completion": ""}]
    with caplog.at_level(logging.WARNING, "constrained_sft.data.formats"):
        out = list(to_trl_format(IterableDataset.from_generator(lambda: iter(rows)), "auto"))
    assert (
        len(out) == 4
        and "train row 4 (prompt_completion format, streamed): skipped: an empty completion" in caplog.text
    )


def test_rows_with_answers_is_the_same_rule_on_raw_rows():
    kept, skipped = rows_with_answers(SHAREGPT, "sharegpt", "first_turn")
    assert kept == [SHAREGPT[0], SHAREGPT[3]] and skipped == 3
    with pytest.raises(DataError, match=r"row 1 \(sharegpt format\)"):
        rows_with_answers([ANSWERED, {"conversations": 3}], "sharegpt", "first_turn")
