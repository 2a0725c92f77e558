"""
Head-to-head judging with numbers a user can trust, for every judge: each pair of answers is judged in both orders
(the model's answer shown first, then the reference's), so a judge's position bias cancels in the win rate and is
measured as the *order agreement*; the win rate (draws count half) comes with a 95% bootstrap interval over
instructions, and over training seeds when several model / reference pairs answered.

A verdict is the model's share of the win in [0, 1]: 1, 0.5 or 0 for a judge that answers with a label, any value
between for alpaca_eval's weighted annotator (`--judge gpt4`: the preference its log-probabilities give). The win rate
averages the shares as they are (alpaca_eval's own weighted win rate). The counts and the judge's consistency are read
by the side each share favours (`side`): the model's above 0.5 + `DRAW_TOLERANCE`, the reference's below 0.5 -
`DRAW_TOLERANCE`, a draw between. So a weighted judge with no position bias, whose two orders give 0.93 and 0.91,
agrees with itself (order agreement 1.00) and wins twice; read as exact values, it agreed on no pair and won nothing.

A judge is anything with `prefer(pairs) -> preferences` (1 = first shown better, 2 = second, 1.5 = draw, None = no
parseable verdict), a `name` and a `proxy` flag (a stand-in that is no quality judge; every report says so), and,
where it pays per request, a `cost()` that the result reports:
`AlpacaEvalJudge` runs an alpaca_eval annotator config (API judges, the local chat-model judge, the offline test
judge) with its own order randomisation off; `proxy.ReferenceProxyJudge` compares answers with a reference answer.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ...utils.types import Kwargs
from ..bootstrap import Statistic, bootstrap_interval
from .cost import Spend
from .endpoint import JudgeEndpoint
from .results import JudgeCost, WinRateLevel


@dataclass(frozen=True)
class Pair:
    instruction: str
    first: str
    second: str
    reference: str | None = None  # the data's own answer, for judges that compare with it


class Judge(Protocol):
    name: str
    proxy: bool

    def prefer(self, pairs: Sequence[Pair]) -> list[float | None]: ...


class AlpacaEvalJudge:
    """An alpaca_eval annotator config (a registered judge's `config`, or any config name / path) asked about each
    pair exactly as shown: alpaca_eval's random order switch is off, since `judge_both_orders` shows both orders
    itself. Verdicts are cached in `caching_path`, so a rerun pays only for new pairs."""

    proxy = False

    def __init__(self, config: str, judge_kwargs: Kwargs, caching_path: str | None, name: str):
        from .annotator_configs import annotator_class, kept_columns

        self.name = name
        self.annotator = annotator_class()(
            annotators_config=config,
            caching_path=caching_path,
            is_randomize_output_order=False,
            other_output_keys_to_keep=kept_columns(),
            **judge_kwargs,
        )
        self.raw: list[dict] = []  # alpaca_eval's annotations of the last call, raw completions included
        self.verdicts: list[dict] = []  # every call's annotations: what `cost` sums
        self.spend: Spend | None = None  # an API judge's, set where it is built (`judge_registry`)
        self.endpoint: JudgeEndpoint | None = None  # an API judge's server, likewise

    def prefer(self, pairs: Sequence[Pair]) -> list[float | None]:
        rows = [{"instruction": p.instruction, "output_1": p.first, "output_2": p.second} for p in pairs]
        # an API that still fails after the client's retries: one line naming its server, not a traceback
        with self.endpoint.one_line() if self.endpoint is not None else contextlib.nullcontext():
            self.raw = self.annotator.annotate_pairs(rows)
        self.verdicts += self.raw
        found = {(r["instruction"], r["output_1"], r["output_2"]): r.get("preference") for r in self.raw}
        return [_parsed(found.get((r["instruction"], r["output_1"], r["output_2"]))) for r in rows]

    def cost(self) -> JudgeCost | None:
        """What every verdict this judge gave cost (`cost.Spend.result`); None for a judge that pays nothing."""
        column = f"{self.annotator.annotation_key}_"  # alpaca_eval's prefix of a completions function's outputs
        return None if self.spend is None else self.spend.result(self.verdicts, column)


def _parsed(preference) -> float | None:
    """alpaca_eval marks a verdict it could not parse as None, NaN or -1."""
    if preference is None or preference != preference or not 1 <= float(preference) <= 2:
        return None
    return float(preference)


def judge_both_orders(judge: Judge, model: list[str], reference: list[str], rows: list[dict]) -> list[dict]:
    """
    Per instruction of `rows` ({instruction, reference?}): the verdict with the model's answer first and with the
    reference's first, each turned into the model's share of the win (1 win, 0.5 draw, 0 loss; None unparsed). An
    empty answer is a result, not a question for the judge: it loses to any answer in both orders, and two empty
    answers draw (`empty` names the side: model, reference or both).
    """
    refs = [r.get("reference") for r in rows]
    empty = [_empty_side(m, b) for m, b in zip(model, reference, strict=True)]
    asked = [i for i, side in enumerate(empty) if side is None]
    shown = [Pair(rows[i]["instruction"], model[i], reference[i], refs[i]) for i in asked]
    swapped = [Pair(p.instruction, p.second, p.first, p.reference) for p in shown]
    prefs = judge.prefer(shown + swapped) if shown else []
    if not shown and hasattr(judge, "raw"):
        judge.raw = []  # nothing asked: no raw annotations of an earlier call left behind
    n, out = len(shown), []
    for i, (r, side) in enumerate(zip(rows, empty, strict=True)):
        if side is not None:
            share = {"model": 0.0, "reference": 1.0, "both": 0.5}[side]
            out.append({"instruction": r["instruction"], "model_first": share, "model_second": share, "empty": side})
            continue
        k = asked.index(i)
        first, second = prefs[k], prefs[n + k]  # the model's answer shown first, then second
        out.append(
            {
                "instruction": r["instruction"],
                "model_first": None if first is None else 2.0 - first,  # preference 1: the first shown won
                "model_second": None if second is None else second - 1.0,
            }
        )
    return out


def _empty_side(model: str, reference: str) -> str | None:
    blank = (not model.strip(), not reference.strip())
    return {(True, False): "model", (False, True): "reference", (True, True): "both"}.get(blank)


def _win_rate(sums: dict[str, np.ndarray]) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):  # a resample of unparsed pairs only: NaN, left out
        return 100.0 * sums["wins"] / sums["count"]


WIN_RATE = Statistic("win_rate", _win_rate)


DRAW_TOLERANCE = 0.05  # a share within this of 0.5 favours neither answer: a weighted judge's 0.52 is a draw


def side(share: float) -> int:
    """The side a verdict (the model's share of the win) favours: 1 the model, -1 the reference, 0 neither (a draw:
    within `DRAW_TOLERANCE` of 0.5)."""
    return 1 if share > 0.5 + DRAW_TOLERANCE else -1 if share < 0.5 - DRAW_TOLERANCE else 0


def unit_scores(verdicts: list[list[dict]]) -> dict[str, np.ndarray]:
    """`verdicts[s][i]` (seed pair s, instruction i) -> `{wins, count, agree, both, first, decided}` as `[S, N]`:
    the model's win shares summed over the parsed orders, and the counts behind the agreement and position rates."""
    keys = ("wins", "count", "agree", "both", "first", "decided")
    out = {k: np.zeros((len(verdicts), len(verdicts[0]))) for k in keys}
    for s, seed in enumerate(verdicts):
        for i, v in enumerate(seed):
            a, b = v["model_first"], v["model_second"]
            parsed = [x for x in (a, b) if x is not None]
            out["wins"][s, i], out["count"][s, i] = sum(parsed), len(parsed)
            if "empty" in v:
                continue  # decided by the rule, not by the judge: no part of its agreement or position bias
            if a is not None and b is not None:
                out["both"][s, i], out["agree"][s, i] = 1, float(side(a) == side(b))
            # position: a decided verdict for the first shown answer (model first: the model's side; reference first:
            # the reference's)
            out["first"][s, i] = (a is not None and side(a) == 1) + (b is not None and side(b) == -1)
            out["decided"][s, i] = sum(side(x) != 0 for x in parsed)
    return out


def win_rate_level(
    verdicts: list[list[dict]], n_boot: int, gamma: float = 0.0, confidence: float = 0.95
) -> WinRateLevel:
    """Level `gamma`'s win rate (percent, draws half) with its percentile bootstrap interval over seed pairs and
    instructions (`bootstrap.bootstrap_interval`), the verdict counts by the side each favours (`side`), and the
    judge's order agreement (share of pairs whose two orders favour the same side) and first-position rate (share of
    decided verdicts for the answer shown first)."""
    scores = unit_scores(verdicts)
    n_pairs = int(scores["count"].size)
    if not scores["count"].sum():
        return WinRateLevel(gamma, None, None, None, n_verdicts=0, unparsed=2 * n_pairs, confidence=confidence)
    stacked = {k: scores[k][None] for k in ("wins", "count")}  # [1, S, N]: one level
    value, low, high = bootstrap_interval(stacked, WIN_RATE, n_boot, confidence)
    wins_first = [v["model_first"] for seed in verdicts for v in seed]
    wins_second = [v["model_second"] for seed in verdicts for v in seed]
    parsed = [x for x in wins_first + wins_second if x is not None]
    both, decided = scores["both"].sum(), scores["decided"].sum()
    sides = [v.get("empty") for seed in verdicts for v in seed]
    return WinRateLevel(
        gamma=float(gamma),
        win_rate=float(value[0]),
        low=float(low[0]),
        high=float(high[0]),
        confidence=confidence,
        n_wins=sum(side(x) == 1 for x in parsed),
        n_losses=sum(side(x) == -1 for x in parsed),
        n_draws=sum(side(x) == 0 for x in parsed),
        n_verdicts=len(parsed),
        unparsed=2 * n_pairs - len(parsed),
        order_agreement=float(scores["agree"].sum() / both) if both else None,
        first_position_rate=float(scores["first"].sum() / decided) if decided else None,
        empty_model=sum(side in ("model", "both") for side in sides),
        empty_reference=sum(side in ("reference", "both") for side in sides),
    )


def lc_annotations(verdicts: list[dict], model: list[dict], reference: list[dict]) -> list[dict]:
    """alpaca_eval-style annotations for its length-controlled win rate: the model as output_2, the preference its
    mean share of the win over the parsed orders (1 + share, in alpaca_eval's 1..2 scale)."""
    out = []
    for v, m, r in zip(verdicts, model, reference, strict=True):
        parsed = [x for x in (v["model_first"], v["model_second"]) if x is not None]
        if parsed:
            out.append(
                {
                    "instruction": v["instruction"],
                    "output_1": r["output"],
                    "output_2": m["output"],
                    "generator_1": r["generator"],
                    "generator_2": m["generator"],
                    "preference": 1 + float(np.mean(parsed)),
                    "annotator": "both_orders",
                }
            )
    return out


def write_verdicts(path: str, verdicts: list[dict], model: list[dict], reference: list[dict]) -> None:
    """Every pair's answers and both verdicts, for a reader who wants to check the judge."""
    from ...utils.files import write_json

    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json(
        path,
        [
            {**v, "model_output": m["output"], "reference_output": r["output"], "reference": m.get("reference")}
            for v, m, r in zip(verdicts, model, reference, strict=True)
        ],
    )
