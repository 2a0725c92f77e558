"""Head-to-head judging: both orders, what a position-biased judge does to the numbers, the win-rate interval's
coverage, and the offline proxy judge."""

import numpy as np
import pytest

from constrained_sft.evaluation.alpaca.headtohead import Pair, judge_both_orders, unit_scores, win_rate_level
from constrained_sft.testing import tiny_encoder, tiny_tokenizer

ROWS = [{"instruction": f"s{i} s{i + 1}", "reference": f"s{i + 2}"} for i in range(20)]


class FirstShown:
    """A judge with pure position bias: the answer shown first always wins."""

    name, proxy = "first", False

    def __init__(self):
        self.seen: list[Pair] = []

    def prefer(self, pairs):
        self.seen += pairs
        return [1.0] * len(pairs)


class Fixed:
    """A judge with a fixed opinion per answer, blind to position: the answer in `good` wins; two good ones draw."""

    name, proxy = "fixed", False

    def __init__(self, good):
        self.good = set(good)

    def prefer(self, pairs):
        return [
            1.5 if (p.first in self.good) == (p.second in self.good) else 1.0 if p.first in self.good else 2.0
            for p in pairs
        ]


def test_a_judge_that_always_prefers_the_first_answer_shows_order_agreement_0_and_a_50_percent_win_rate():
    judge = FirstShown()
    model, reference = [f"m{i}" for i in range(20)], [f"r{i}" for i in range(20)]
    verdicts = judge_both_orders(judge, model, reference, ROWS)
    assert [p.first for p in judge.seen] == model + reference  # every pair shown in both orders
    level = win_rate_level([verdicts], n_boot=500)
    assert level.order_agreement == 0.0 and level.first_position_rate == 1.0
    assert level.win_rate == 50.0 and level.low == level.high == 50.0
    assert level.n_wins == level.n_losses == 20 and level.n_draws == 0 and level.unparsed == 0


def test_a_position_blind_judge_agrees_with_itself_and_counts_draws_half():
    model, reference = [f"m{i}" for i in range(20)], [f"r{i}" for i in range(20)]
    good = model[:10] + reference[10:15] + model[15:]  # model wins 15, then 5 pairs where both are good -> draws
    good += reference[15:]
    verdicts = judge_both_orders(Fixed(good), model, reference, ROWS)
    level = win_rate_level([verdicts], n_boot=500)
    assert level.order_agreement == 1.0
    assert level.win_rate == pytest.approx(100 * (10 + 0.5 * 5) / 20)
    assert level.n_draws == 10 and level.low < level.win_rate < level.high


def test_an_empty_answer_loses_without_the_judge_and_is_counted():
    """Under heavy noise a model may answer nothing: that answer loses to any answer in both orders, two empty answers
    draw, the judge is never shown them (a position-biased judge would otherwise give the empty answer half its
    verdicts), and the level counts each side's empty answers."""
    judge = FirstShown()
    model = ["", "m1", "", "m3"] + [f"m{i}" for i in range(4, 20)]
    reference = ["r0", "", "", "r3"] + [f"r{i}" for i in range(4, 20)]
    verdicts = judge_both_orders(judge, model, reference, ROWS)
    assert [(v["model_first"], v["model_second"], v.get("empty")) for v in verdicts[:4]] == [
        (0.0, 0.0, "model"), (1.0, 1.0, "reference"), (0.5, 0.5, "both"), (1.0, 0.0, None)
    ]  # fmt: skip
    assert not {p.first for p in judge.seen} & {"", "r0"} and len(judge.seen) == 2 * 17
    level = win_rate_level([verdicts], 200)
    assert (level.empty_model, level.empty_reference) == (2, 2)
    assert level.order_agreement == 0.0  # the judge's own verdicts only: the rule's are no part of its agreement
    assert level.to_dict()["empty_model"] == 2


def test_unparsed_verdicts_are_left_out_and_counted():
    verdicts = [{"instruction": "x", "model_first": 1.0, "model_second": None},
                {"instruction": "y", "model_first": None, "model_second": None}]  # fmt: skip
    scores = unit_scores([verdicts])
    assert scores["count"].tolist() == [[1, 0]] and scores["both"].sum() == 0
    level = win_rate_level([verdicts], n_boot=100)
    assert level.win_rate == 100.0 and level.unparsed == 3 and level.order_agreement is None


def test_the_win_rate_interval_covers_a_known_rate():
    """300 simulated studies of 150 instructions judged by a noisy but position-blind judge whose true win rate is
    60% (wins 0.5, draws 0.2, losses 0.3): the 95% interval covers 60 in 90-99% of them."""
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(300):
        outcome = rng.choice([1.0, 0.5, 0.0], size=150, p=[0.5, 0.2, 0.3])
        verdicts = [[{"instruction": str(i), "model_first": o, "model_second": o} for i, o in enumerate(outcome)]]
        level = win_rate_level(verdicts, n_boot=400)
        covered += level.low <= 60.0 <= level.high
    assert 0.90 <= covered / 300 <= 0.99


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    root = tmp_path_factory.mktemp("encoder")
    tiny_encoder("bert", layers=2).save_pretrained(root)
    tiny_tokenizer().save_pretrained(root)
    return str(root)


def test_the_proxy_judge_prefers_the_answer_closer_to_the_reference_whatever_the_order(encoder):
    from constrained_sft.evaluation.alpaca.proxy import ReferenceProxyJudge

    judge = ReferenceProxyJudge(encoder)
    assert judge.proxy and "proxy" in judge.name
    pairs = [Pair("q", "s1 s2 s3", "s20 s21", "s1 s2 s3"), Pair("q", "s20 s21", "s1 s2 s3", "s1 s2 s3"),
             Pair("q", "s5 s6", "s5 s6", "s1")]  # fmt: skip
    assert judge.prefer(pairs) == [1.0, 2.0, 1.5]  # the exact reference wins in either place; identical answers draw
    with pytest.raises(ValueError, match="the proxy judge compares answers with a reference answer"):
        judge.prefer([Pair("q", "a", "b", None)])


def test_the_proxy_judge_cuts_answers_to_the_encoders_positions(encoder):
    """The tiny encoder has 80 positions, fewer than the proxy's 256-token cut: a longer answer is cut at 80."""
    from constrained_sft.evaluation.alpaca.proxy import ReferenceProxyJudge

    judge = ReferenceProxyJudge(encoder)
    assert judge.max_length == 80
    long = " ".join(["s1 s2 s3"] * 100)  # 300 tokens
    assert judge.prefer([Pair("q", long, "s20 s21", "s1 s2 s3")]) == [1.0]


class Weighted:
    """alpaca_eval's weighted annotator as it answers: a preference in [1, 2] from log-probabilities, never exactly a
    label, with no position bias (the same answer favoured in both orders, by slightly different weights)."""

    name, proxy = "weighted", False

    def __init__(self, good):
        self.good, self.calls = set(good), 0

    def prefer(self, pairs):
        out = []
        for p in pairs:
            self.calls += 1
            jitter = 0.01 * (self.calls % 3)  # 0.91, 0.92, 0.93 ...: the second order never repeats the first
            if (p.first in self.good) == (p.second in self.good):
                out.append(1.5 + jitter)  # a near-even weight: a draw
            else:
                out.append(1.09 + jitter if p.first in self.good else 1.91 - jitter)
        return out


def test_a_weighted_judge_without_position_bias_is_read_by_the_side_it_favours():
    """Its two orders agree on every pair (exact comparison: on none), wins / losses / draws are counted (exactly: 0 /
    0 / 0 of 40), and the win rate stays the mean of the weights."""
    model, reference = [f"m{i}" for i in range(20)], [f"r{i}" for i in range(20)]
    good = model[:12] + reference[12:16] + model[16:] + reference[16:]  # model 12, reference 4, 4 draws
    verdicts = judge_both_orders(Weighted(good), model, reference, ROWS)
    level = win_rate_level([verdicts], n_boot=200)
    assert level.order_agreement == 1.0 and (level.n_wins, level.n_losses, level.n_draws) == (24, 8, 8)
    assert level.first_position_rate == pytest.approx(0.5)
    shares = [x for v in verdicts for x in (v["model_first"], v["model_second"])]
    assert level.win_rate == pytest.approx(100 * np.mean(shares)) and min(shares) > 0 and max(shares) < 1
