"""
What an API judge costs, from what its server said: each answer's `usage` (prompt and completion tokens; a reasoning
model's hidden reasoning is in its completion tokens) kept beside its verdict, summed over every verdict behind a
result - asked by this run or answered from an earlier run's - and priced at the judge model's list price where one
is known (`PRICES`); `Spend` counts what this run asked.

    gpt-5: $1.25 per million input tokens, $10 per million output tokens

A price table is needed because the API reports tokens, not money. The table is OpenAI's list price at the date
given (https://openai.com/api/pricing/); prices change, so the report names the rate it used, and a model missing from
the table is reported in tokens only, as is every self-hosted judge. alpaca_eval's own decoder (`--judge gpt4`) says
only a request's total tokens and prices them itself (its table: $10 per million tokens for gpt-4-1106-preview); such
a price is taken as alpaca_eval gives it, and the report says so.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from .results import JudgeCost

USAGE = ("prompt_tokens", "completion_tokens", "total_tokens", "usage_invalid")  # beside each API verdict (`usage_of`)
PRICE = "price_per_example"  # alpaca_eval's column: its decoder's price; ours leave it NaN


@dataclass(frozen=True)
class ListPrice:
    input_per_million: float  # USD per million prompt tokens (uncached)
    output_per_million: float  # USD per million completion tokens, reasoning included
    source: str  # where the figures were read, and when

    def usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million) / 1e6

    def label(self, model: str | None) -> str:
        """How the report names the rate: "at gpt-5's list price ($1.25 / $10 per million ...; source)"."""
        whose = f"{model}'s" if model else "the"
        return (
            f"at {whose} list price (${self.input_per_million:g} / ${self.output_per_million:g} per million input / "
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


MAX_TOKENS = 10_000_000  # tokens one judging request can plausibly use; a server reporting more (or fewer than 0) is
INVALID = "usage_invalid"  # not believed: the verdict's usage is unknown and flagged, never priced


def token_count(value: object) -> int | None:
    """A token count a server reported: a whole number in [0, MAX_TOKENS] (alpaca_eval's per-prompt share of a batch
    may be a float), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return round(value) if 0 <= value <= MAX_TOKENS else None


def usage_fields(response) -> dict[str, object]:
    """A chat completion's `usage` as the per-example fields our completion functions return (None where the server
    sent none: llama.cpp's and vLLM's servers send it, not every proxy does)."""
    usage = getattr(response, "usage", None)
    return {
        "prompt_tokens": getattr(usage, "prompt_tokens", None),
        "completion_tokens": getattr(usage, "completion_tokens", None),
    }


def usage_of(answer: dict) -> dict[str, int | None]:
    """One answer's `USAGE`, whichever decoder gave it: ours say the split, alpaca_eval's a total (a batch's total
    over its prompts: a float) inside `completions_all`. A count that is no count, negative or over `MAX_TOKENS`
    leaves the usage unknown and sets `INVALID` (1), so the cost can say so."""
    raw = answer.get("completions_all")
    given = {
        "prompt_tokens": answer.get("prompt_tokens"),
        "completion_tokens": answer.get("completion_tokens"),
        "total_tokens": raw.get("total_tokens") if isinstance(raw, dict) else None,
    }
    if answer.get(INVALID) or any(v is not None and token_count(v) is None for v in given.values()):
        return {"prompt_tokens": None, "completion_tokens": None, "total_tokens": None, INVALID: 1}
    prompt, completion = token_count(given["prompt_tokens"]), token_count(given["completion_tokens"])
    total = (
        prompt + completion if prompt is not None and completion is not None else token_count(given["total_tokens"])
    )
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total, INVALID: 0}


class Spend:
    """One API judge: its model and list price (None: self-hosted, or a model without one), and the requests this
    run sent (thread-safe: they are answered `kept.WORKERS` at a time)."""

    def __init__(self, model: str | None, price: ListPrice | None):
        self.model, self.price = model, price
        self.lock = threading.Lock()
        self.requests = 0

    def add(self) -> None:
        """One request answered."""
        with self.lock:
            self.requests += 1

    def result(self, verdicts: Sequence[dict], column: str = "") -> JudgeCost:
        """The cost of `verdicts` (alpaca_eval annotation rows, each with `USAGE` and `PRICE` under the prefix
        `column`), summed over those whose usage is known: alpaca_eval keeps no output of a verdict it could not
        parse, and a server may report none. Priced by the list price where each says its split, else as
        alpaca_eval priced each where it did, else not."""

        def value(row: dict, name: str) -> float | None:
            v = row.get(column + name)
            return v if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 else None

        known = [row for row in verdicts if value(row, "total_tokens") is not None]
        invalid = sum(bool(value(row, INVALID)) for row in verdicts)

        def total(name: str) -> float | None:
            values = [v for row in known if (v := value(row, name)) is not None]
            return sum(values) if known and len(values) == len(known) else None

        prompt, completion, tokens = (None if (t := total(name)) is None else int(t) for name in USAGE[:3])
        if prompt is not None and completion is not None and self.price is not None:
            usd, basis = self.price.usd(prompt, completion), self.price.label(self.model)
        elif (alpaca := total(PRICE)) is not None:
            usd, basis = alpaca, ALPACA_EVAL_PRICE
        else:
            usd, basis = None, None
        return JudgeCost(
            model=self.model,
            verdicts=len(verdicts),
            requests=self.requests,
            with_usage=len(known),
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=tokens,
            price_usd=usd,
            price_basis=basis,
            invalid_usage=invalid,
        )
