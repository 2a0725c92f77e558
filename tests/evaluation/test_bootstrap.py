"""The one paired bootstrap against cases computed by hand: means, pooled ratios, directions, shapes."""

import itertools

import numpy as np
import pytest

from constrained_sft.evaluation.bootstrap import Statistic, bootstrap_interval, paired_bootstrap, verdict

MEAN = Statistic("mean", lambda s: s["x"][..., 0] / s["n"][..., 0])  # pooled over the drawn (seed, unit) pairs


def scores(x) -> dict:
    """One level: x `[S, N]` with one count per unit, as `[K=1, S, N]` unit scores."""
    x = np.asarray(x, dtype=np.float64)
    return {"x": x[None], "n": np.ones_like(x)[None]}


def diff(d) -> dict[str, object]:
    """An interval of mean(A) - mean(B) whose per-unit differences are `d` (B is all zeros)."""
    return paired_bootstrap(scores(d), scores(np.zeros_like(d)), [MEAN], n_boot=4000)["mean"]


def test_two_examples_by_hand():
    # one seed, differences [0, 1]: resampled means are 0 (1/4), 0.5 (1/2), 1 (1/4); the 95% interval is [0, 1]
    iv = diff([[0.0, 1.0]])
    assert iv.estimate == 0.5 and (iv.low, iv.high) == (0.0, 1.0) and iv.verdict == "same"


def test_constant_difference_has_no_width_and_a_verdict():
    iv = paired_bootstrap(scores(np.full((3, 50), 0.25)), scores(np.zeros((3, 50))), [MEAN])["mean"]
    assert iv.to_dict() == {"estimate": 0.25, "low": 0.25, "high": 0.25, "confidence": 0.95, "verdict": "better"}
    assert diff(np.full((2, 5), -0.1)).verdict == "worse"


def test_quantiles_match_the_exact_bootstrap_distribution():
    # three examples, one seed: all 27 equally likely resamples enumerated by hand
    d = np.array([-1.0, 0.0, 2.0])
    exact = np.sort([np.mean(c) for c in itertools.product(d, repeat=3)])
    lo, hi = np.quantile(exact, [0.1, 0.9])
    iv = paired_bootstrap(scores(d[None]), scores(np.zeros((1, 3))), [MEAN], n_boot=20000, confidence=0.8, seed=1)
    assert iv["mean"].low == pytest.approx(lo, abs=0.34) and iv["mean"].high == pytest.approx(hi, abs=0.34)
    # the spread of the resampled means is sd / sqrt(n) (population sd, bootstrap)
    iv95 = diff(np.tile(d, 200)[None])
    se = d.std() / np.sqrt(600)
    assert iv95.low == pytest.approx(d.mean() - 1.96 * se, abs=0.02)
    assert iv95.high == pytest.approx(d.mean() + 1.96 * se, abs=0.02)


def test_seeds_are_resampled_too():
    # one example, two seeds that disagree: the same 0 / 0.5 / 1 distribution as two examples
    assert (lambda iv: (iv.low, iv.high))(diff([[0.0], [1.0]])) == (0.0, 1.0)
    # seeds that agree give no seed variance: the interval is the examples' alone
    same = paired_bootstrap(scores([[0.0, 1.0], [0.0, 1.0]]), scores(np.zeros((2, 2))), [MEAN], n_boot=4000, seed=3)
    assert (same["mean"].low, same["mean"].high) == (0.0, 1.0)


def test_a_ratio_is_pooled_within_each_resample():
    """Token accuracy is correct / tokens summed over the drawn sequences, not a mean of per-sequence accuracies:
    a long sequence weighs by its tokens. One seed, two sequences: 1 of 1 correct and 0 of 9 correct."""
    a = {"x": np.array([[[1.0, 0.0]]]), "n": np.array([[[1.0, 9.0]]])}
    b = {"x": np.zeros((1, 1, 2)), "n": np.array([[[1.0, 9.0]]])}
    iv = paired_bootstrap(a, b, [MEAN], n_boot=4000)["mean"]
    assert iv.estimate == pytest.approx(0.1)  # 1 / 10 pooled, where the per-sequence mean would say 0.5
    # resamples: {s1, s1} -> 1, {s1, s2} -> 0.1, {s2, s2} -> 0
    assert (iv.low, iv.high) == (0.0, 1.0)


@pytest.mark.parametrize(("low", "high", "up", "expected"), [
    (0.1, 0.2, True, "better"), (0.1, 0.2, False, "worse"), (-0.2, -0.1, True, "worse"),
    (-0.2, -0.1, False, "better"), (-0.1, 0.1, True, "same"), (-0.1, 0.1, False, "same"),
])  # fmt: skip
def test_one_verdict_rule_for_both_directions(low, high, up, expected):
    assert verdict(low, high, up) == expected


def test_one_arm_bands():
    value, low, high = bootstrap_interval(scores([[0.0, 1.0]]), MEAN, n_boot=4000)
    assert value == 0.5 and (low, high) == (0.0, 1.0)


@pytest.mark.parametrize(
    "a, b, kwargs, match",
    [
        (scores([[0.0]]), {"x": np.zeros((1, 1, 2)), "n": np.ones((1, 1, 2))}, {}, "one shape"),
        ({"x": np.zeros((1, 1, 0)), "n": np.zeros((1, 1, 0))}, {"x": np.zeros((1, 1, 0)), "n": np.zeros((1, 1, 0))}, {}, "non-empty"),
        (scores([[0.0, 1.0]]), scores([[0.0, 1.0]]), {"confidence": 1.5}, "confidence"),
    ],
)  # fmt: skip
def test_bad_input(a, b, kwargs, match):
    with pytest.raises(ValueError, match=match):
        paired_bootstrap(a, b, [MEAN], **kwargs)
