"""What a judge costs (`alpaca.cost`): which list price a model name gets, the totals a mix of answers gives, and a
head-to-head with its cost through its JSON form."""

import pytest

from constrained_sft.evaluation.alpaca.cost import ALPACA_EVAL_PRICE, PRICES, Spend, list_price
from constrained_sft.evaluation.report.headtohead import cost_text
from constrained_sft.evaluation.results import HeadToHead, JudgeCost, WinRateLevel


@pytest.mark.parametrize(
    ("model", "row"),
    [("gpt-5", "gpt-5"), ("gpt-5-2025-08-07", "gpt-5"), ("gpt-5-mini", "gpt-5-mini"), ("gpt-5-pro", None),
     ("gpt-5-chat-latest", None), ("Qwen/Qwen2.5-7B-Instruct", None), (None, None)],
)  # fmt: skip
def test_a_model_gets_its_own_list_price_or_none(model, row):
    """A dated snapshot is its model; another model of the family (pro: 12x gpt-5's price) is not priced as it."""
    assert list_price(model) is (PRICES[row] if row else None)


def test_answers_without_a_split_leave_the_price_to_whoever_gave_one():
    ours = Spend("gpt-5", list_price("gpt-5"))
    ours.add({"prompt_tokens": 1000, "completion_tokens": 100})
    ours.add({"prompt_tokens": 3000, "completion_tokens": 300})
    ours.reuse(2)
    cost = ours.result()
    assert (cost.requests, cost.reused, cost.prompt_tokens, cost.completion_tokens, cost.total_tokens) == (
        2, 2, 4000, 400, 4400)  # fmt: skip
    assert cost.price_usd == pytest.approx((4000 * 1.25 + 400 * 10) / 1e6)
    alpaca = Spend("gpt-4-1106-preview", list_price("gpt-4-1106-preview"))  # its decoder: totals and its own price
    alpaca.add({"completions_all": {"total_tokens": 500.0}, "price_per_example": 0.005})
    cost = alpaca.result()
    assert cost.total_tokens == 500 and cost.prompt_tokens is None and cost.price_usd == 0.005
    assert cost.price_basis == ALPACA_EVAL_PRICE
    mixed = Spend("gpt-5", list_price("gpt-5"))  # one answer without usage: no totals, no price, said so
    mixed.add({"prompt_tokens": 10, "completion_tokens": 1})
    mixed.add({"prompt_tokens": None, "completion_tokens": None})
    assert mixed.result().total_tokens is None and mixed.result().price_usd is None
    assert "the server reported no token usage" in cost_text(mixed.result())


def test_a_head_to_head_keeps_its_cost_through_json():
    level = WinRateLevel(0.0, 50.0, 40.0, 60.0, n_verdicts=12, unparsed=0)
    cost = JudgeCost("gpt-5", requests=12, prompt_tokens=7000, completion_tokens=600, total_tokens=7600,
                     price_usd=0.01475, price_basis="at gpt-5's list price")  # fmt: skip
    head = HeadToHead("constrained", "erm", "gpt5", "openai_reasoning (gpt-5)", [level], 2000, cost=cost)
    assert HeadToHead.from_dict(head.to_dict()) == head
    assert "cost" not in HeadToHead("a", "b", "test", "offline_test", [level], 2000).to_dict()  # free judges
    assert cost_text(cost).endswith("per seed pair.") and "$0.0025" in cost_text(cost)  # 2 x 0.01475 / 12
    assert cost_text(JudgeCost("gpt-5", requests=0, reused=12)).startswith("Judge cost: no request this run")
