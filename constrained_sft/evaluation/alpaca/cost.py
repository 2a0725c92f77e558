"""
What an API judge costs, from what its server said: every answered request's `usage` (prompt and completion tokens;
a reasoning model's hidden reasoning is in its completion tokens) summed by `Spend`, priced at the judge model's list
price where one is known (`PRICES`), and how many verdicts came from an earlier run's kept answers for nothing.

    gpt-5: $1.25 per million input tokens, $10 per million output tokens

A price table is needed because the API reports tokens, not money. The table is OpenAI's list price at the date
given (https://openai.com/api/pricing/); prices change, so the report names the rate it used and a model missing from
the table is reported in tokens only, as is every self-hosted judge. alpaca_eval's own decoder (`--judge gpt4`) says
only a request's total tokens and prices them itself (its table: $10 per million tokens for gpt-4-1106-preview); such
a price is taken as alpaca_eval gives it, and the report says so.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass

from ..results import JudgeCost


@dataclass(frozen=True)
class ListPrice:
    input_per_million: float  # USD per million prompt tokens (uncached)
    output_per_million: float  # USD per million completion tokens, reasoning included
    source: str  # where the figures were read, and when

    def usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million) / 1e6

    def label(self, model: str) -> str:
        """How the report names the rate: "at gpt-5's list price ($1.25 / $10 per million ...; source)"."""
        return (
            f"at {model}'s list price (${self.input_per_million:g} / ${self.output_per_million:g} per million input / "
            f"output tokens; {self.source})"
        )


OPENAI_2025 = "openai.com/api/pricing, August 2025"
PRICES = {
    "gpt-5": ListPrice(1.25, 10.0, OPENAI_2025),  # the paper's judge
    "gpt-5-mini": ListPrice(0.25, 2.0, OPENAI_2025),
    "gpt-5-nano": ListPrice(0.05, 0.40, OPENAI_2025),
    "gpt-4-1106-preview": ListPrice(10.0, 30.0, "openai.com/api/pricing, November 2023"),  # --judge gpt4's model
}
ALPACA_EVAL_PRICE = "as alpaca_eval's decoder prices its total tokens"


def list_price(model: str | None) -> ListPrice | None:
    """`model`'s list price: its own row, or a dated snapshot's (`gpt-5-2025-08-07` is `gpt-5`); None where unknown."""
    if not model:
        return None
    for name, price in PRICES.items():
        if re.fullmatch(re.escape(name) + r"(-\d{4}-\d{2}-\d{2})?", model):
            return price
    return None


def usage_fields(response) -> dict[str, int | None]:
    """A chat completion's `usage` as the per-example fields our completion functions return (None where the server
    sent none: llama.cpp's and vLLM's servers send it, not every proxy does)."""
    usage = getattr(response, "usage", None)
    return {
        "prompt_tokens": getattr(usage, "prompt_tokens", None),
        "completion_tokens": getattr(usage, "completion_tokens", None),
    }


class Spend:
    """The running total of one judge's requests (thread-safe: requests are answered `kept.WORKERS` at a time).
    `price`: the judge model's list price (None: a self-hosted judge, or a model without one), `model` its name."""

    def __init__(self, model: str | None, price: ListPrice | None):
        self.model, self.price = model, price
        self.lock = threading.Lock()
        self.requests = self.reused = 0
        self.prompt = self.completion = self.total = 0
        self.split = self.totals = True  # every answer so far said its prompt / completion split; its total
        self.alpaca_eval_usd, self.alpaca_eval_priced = 0.0, True

    def add(self, answer: dict) -> None:
        """One answered request: `answer` is what a completions function returned for it (`prompt_tokens` and
        `completion_tokens` from ours; alpaca_eval's decoder: the total in `completions_all` and its own
        `price_per_example`, which ours leave at 0 and is read only beside `completions_all`)."""
        prompt, completion = answer.get("prompt_tokens"), answer.get("completion_tokens")
        raw = answer.get("completions_all")
        total = raw.get("total_tokens") if isinstance(raw, dict) else None
        price = answer.get("price_per_example")
        priced = isinstance(raw, dict) and isinstance(price, (int, float)) and math.isfinite(price)
        with self.lock:
            self.requests += 1
            if prompt is not None and completion is not None:
                self.prompt, self.completion, total = (
                    self.prompt + prompt,
                    self.completion + completion,
                    prompt + completion,
                )
            else:
                self.split = False
            self.totals = self.totals and total is not None
            self.total += round(total or 0)  # alpaca_eval's is a batch's total over its prompts: a float
            self.alpaca_eval_priced = self.alpaca_eval_priced and priced
            self.alpaca_eval_usd += price if priced else 0.0

    def reuse(self, count: int) -> None:
        """`count` verdicts answered from the kept answers of an earlier run, without a request."""
        with self.lock:
            self.reused += count

    def result(self) -> JudgeCost:
        """The totals as a result; the price by the list price where every answer split its tokens, else as
        alpaca_eval priced them where it did, else none."""
        asked = self.requests > 0
        split = self.split and asked
        if split and self.price is not None:
            usd, basis = self.price.usd(self.prompt, self.completion), self.price.label(self.model)
        elif asked and self.alpaca_eval_priced:
            usd, basis = self.alpaca_eval_usd, ALPACA_EVAL_PRICE
        else:
            usd, basis = None, None
        return JudgeCost(
            model=self.model,
            requests=self.requests,
            reused=self.reused,
            prompt_tokens=self.prompt if split else None,
            completion_tokens=self.completion if split else None,
            total_tokens=self.total if self.totals and asked else None,
            price_usd=usd,
            price_basis=basis,
        )
