"""What a judge costs (`alpaca.cost`): which list price a model name gets, the totals a mix of verdicts gives, and a
head-to-head with its cost through its JSON form."""

import math

import pytest

from constrained_sft.evaluation.alpaca import HeadToHead, JudgeCost, WinRateLevel
from constrained_sft.evaluation.alpaca.cost import ALPACA_EVAL_PRICE, PRICES, Spend, list_price, usage_of
from constrained_sft.evaluation.alpaca.report import cost_text


@pytest.mark.parametrize(
    ("model", "row"),
    [("gpt-5", "gpt-5"), ("gpt-5-2025-08-07", "gpt-5"), ("gpt-5-mini", "gpt-5-mini"), ("gpt-5-pro", None),
     ("gpt-5-chat-latest", None), ("Qwen/Qwen2.5-7B-Instruct", None), (None, None)],
)  # fmt: skip
def test_a_model_gets_its_own_list_price_or_none(model, row):
    """A dated snapshot is its model; another model of the family (pro: 12x gpt-5's price) is not priced as it."""
    assert list_price(model) is (PRICES[row] if row else None)


def verdict(answer: dict, price: float = math.nan) -> dict:
    """An annotation row as alpaca_eval keeps it: the answer's outputs under the `preference_` prefix."""
    return {f"preference_{k}": v for k, v in {**usage_of(answer), "price_per_example": price}.items()}


def test_verdicts_are_priced_by_the_list_price_or_as_their_decoder_priced_them():
    ours = Spend("gpt-5", list_price("gpt-5"))
    ours.add()
    rows = [verdict({"prompt_tokens": 1000, "completion_tokens": 100}),
            verdict({"prompt_tokens": 3000, "completion_tokens": 300})]  # fmt: skip
    cost = ours.result(rows, "preference_")
    assert (cost.verdicts, cost.requests, cost.prompt_tokens, cost.completion_tokens, cost.total_tokens) == (
        2, 1, 4000, 400, 4400)  # fmt: skip
    assert cost.price_usd == pytest.approx((4000 * 1.25 + 400 * 10) / 1e6)
    assert cost.price_basis.startswith("at gpt-5's list price ($1.25 / $10 per million")
    assert list_price("gpt-5").label(None).startswith("at the list price ($1.25")  # a price with no model named
    alpaca = Spend("gpt-4-1106-preview", list_price("gpt-4-1106-preview"))  # its decoder: a total and its own price
    cost = alpaca.result([verdict({"completions_all": {"total_tokens": 500.0}}, 0.005)], "preference_")
    assert cost.total_tokens == 500 and cost.prompt_tokens is None and cost.price_usd == 0.005
    assert cost.price_basis == ALPACA_EVAL_PRICE
    # a verdict without usage (unparsed, or a server that reports none): left out of the sums, and said so
    mixed = Spend("gpt-5", list_price("gpt-5")).result([rows[0], verdict({})], "preference_")
    assert (mixed.verdicts, mixed.with_usage, mixed.total_tokens) == (2, 1, 1100)
    assert "usage known for 1 (alpaca_eval keeps nothing of a verdict it could not parse" in cost_text(mixed)
    none = Spend("gpt-5", list_price("gpt-5")).result([verdict({})], "preference_")
    assert none.total_tokens is None and none.price_usd is None and "token usage unknown" in cost_text(none)
    assert Spend(None, None).result([rows[0]], "preference_").price_usd is None  # self-hosted: tokens only


def test_a_head_to_head_keeps_its_cost_through_json():
    level = WinRateLevel(0.0, 50.0, 40.0, 60.0, n_verdicts=12, unparsed=0)
    cost = JudgeCost("gpt-5", verdicts=12, requests=7, with_usage=12, prompt_tokens=7000, completion_tokens=600, total_tokens=7600,
                     price_usd=0.01475, price_basis="at gpt-5's list price")  # fmt: skip
    head = HeadToHead("constrained", "erm", "gpt5", "openai_reasoning (gpt-5)", [level], 2000, cost=cost)
    assert HeadToHead.from_dict(head.to_dict()) == head
    assert "cost" not in HeadToHead("a", "b", "test", "offline_test", [level], 2000).to_dict()  # free judges
    text = cost_text(cost)
    assert text.startswith("Judge cost: 12 verdicts (7 requested by this run, 5 answered by an earlier run)")
    assert "$0.0025" in text and text.endswith("per seed pair.")  # 2 x 0.01475 / 12 per comparison
    assert "none requested by this run" in cost_text(JudgeCost("gpt-5", verdicts=12, requests=0))
