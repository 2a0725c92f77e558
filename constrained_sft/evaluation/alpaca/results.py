"""AlpacaEval's results as types: one level's answers as `eval generate` wrote them (`LevelAnswers`); a head-to-head
judging (`eval alpaca`, the study's judging): one `WinRateLevel` per noise level and the `HeadToHead` that holds them
with its judge and what the judge cost (`JudgeCost`); one JSON form each (alpaca_eval.json, a study's
`head_to_head`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ...utils.fields import known_keys
from ...utils.files import read_saved
from ...utils.types import JSONObject, JSONRead

ALPACA_JSON = "alpaca_eval.json"
ALPACA_EVAL_SIZE = 805  # AlpacaEval's instructions: the set its length control is fitted on, and a full run's pairs


@dataclass(frozen=True)
class LevelAnswers:
    """One level's answers as `eval generate` wrote them: where (alpaca_eval's format), how many, and how many are
    empty (under heavy noise an empty answer is a result; the judging counts it a loss for the side that gave it)."""

    gamma: float
    path: str
    answers: int
    empty: int


@dataclass(frozen=True)
class WinRateLevel:
    """One level: the model's win rate over the reference (percent, draws half) with its bootstrap interval (None
    when no verdict parsed), the verdict counts, the judge's order agreement (share of pairs whose two orders favour
    the same answer: `headtohead.side`) and first-position rate (share of decided verdicts for the answer shown first), and alpaca_eval's
    length-controlled win rate where it could be computed, and how many answers of each side were empty (judged by
    rule: an empty answer loses to any answer, two empty answers draw)."""

    gamma: float
    win_rate: float | None
    low: float | None
    high: float | None
    n_verdicts: int
    unparsed: int
    confidence: float = 0.95
    n_wins: int = 0
    n_losses: int = 0
    n_draws: int = 0
    order_agreement: float | None = None
    first_position_rate: float | None = None
    lc_win_rate: float | None = None
    lc_standard_error: float | None = None
    empty_model: int = 0  # pairs whose model answer was empty (a loss, or a draw against an empty reference)
    empty_reference: int = 0  # pairs whose reference answer was empty

    @property
    def judged(self) -> bool:
        return self.win_rate is not None

    def to_dict(self) -> JSONObject:
        out = dataclasses.asdict(self)
        if not (self.empty_model or self.empty_reference):  # the layout of results written before they were counted
            del out["empty_model"], out["empty_reference"]
        return out

    @classmethod
    def from_dict(cls, row: JSONRead) -> WinRateLevel:
        """A level as alpaca_eval.json keeps it; a key this version does not know is an error, not a lost number."""
        return cls(**known_keys(cls, row, "win-rate level"))


@dataclass(frozen=True)
class JudgeCost:
    """What an API judge's verdicts behind a result cost, as its server reported usage (`alpaca.cost`): `verdicts`
    asked of the judge (empty answers are not), `requests` of them this run sent (the rest were answered by an
    earlier run; a failed request's retries are not seen), and over the `with_usage` verdicts whose usage is known
    (not: a verdict alpaca_eval could not parse, a server that reports none, a verdict of an earlier version) their
    tokens and `price_usd` (None where no price is known: a self-hosted judge, a model without a list price), with
    the rate it was priced at (`price_basis`)."""

    model: str | None
    verdicts: int
    requests: int
    with_usage: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    price_usd: float | None = None
    price_basis: str | None = None
    invalid_usage: int = 0  # verdicts whose server reported impossible usage (negative, over `cost.MAX_TOKENS`)

    def per_verdict(self, value: float | None) -> float | None:
        """`value` (tokens, dollars, summed over the verdicts with usage) per such verdict; None where unknown."""
        return None if value is None or not self.with_usage else value / self.with_usage

    @classmethod
    def from_dict(cls, row: JSONRead) -> JudgeCost:
        return cls(**known_keys(cls, row, "judge cost"))


@dataclass
class HeadToHead:
    """`model`'s answers judged against `reference`'s by `judge_config` (`judge`: the name the user gave; a proxy is
    no quality judge), every pair in both orders, level by level; `lc_missing_reason`: why there is no
    length-controlled win rate; `files`: what the run wrote (json, plot, html)."""

    model: str
    reference: str
    judge: str
    judge_config: str
    levels: list[WinRateLevel]
    bootstrap_samples: int
    judge_is_proxy: bool = False
    judge_model: str | None = None
    orders: str = "both"
    lc_missing_reason: str | None = None
    cost: JudgeCost | None = None  # an API judge's requests, tokens and price; None for a judge that pays nothing
    files: dict[str, str] = field(default_factory=dict)

    @property
    def judged_levels(self) -> list[WinRateLevel]:
        return [lv for lv in self.levels if lv.judged]

    def to_dict(self) -> JSONObject:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["levels"] = [lv.to_dict() for lv in self.levels]
        if self.cost is None:  # the layout of results written before costs were kept, and of free judges
            del out["cost"]
        else:
            out["cost"] = dataclasses.asdict(self.cost)
        if not self.files:  # a study's judging writes no files of its own
            del out["files"]
        return out

    @classmethod
    def from_dict(cls, data: JSONRead) -> HeadToHead:
        data = dict(data)
        levels = [WinRateLevel.from_dict(row) for row in data.pop("levels")]
        cost = JudgeCost.from_dict(data.pop("cost")) if data.get("cost") is not None else None
        return cls(levels=levels, cost=cost, **known_keys(cls, data, "head-to-head"))

    @classmethod
    def load(cls, folder: str) -> HeadToHead | None:
        """The judging `eval alpaca` wrote into a report folder, or None where it wrote none."""
        return read_saved(folder, ALPACA_JSON, cls.from_dict)
