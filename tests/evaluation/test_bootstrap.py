"""Paired bootstrap intervals against cases computed by hand."""

import itertools

import numpy as np
import pytest

from constrained_sft.evaluation.bootstrap import paired_bootstrap


def test_two_examples_by_hand():
    # one seed, differences [0, 1]: resampled means are 0 (1/4), 0.5 (1/2), 1 (1/4); the 95% interval is [0, 1]
    iv = paired_bootstrap(np.array([[0.0, 1.0]]), n_boot=4000)
    assert iv.estimate == 0.5 and (iv.low, iv.high) == (0.0, 1.0) and iv.verdict == "same"


def test_constant_difference_has_no_width_and_a_verdict():
    assert paired_bootstrap(np.full((3, 50), 0.25)).to_dict() == {
        "estimate": 0.25,
        "low": 0.25,
        "high": 0.25,
        "confidence": 0.95,
        "verdict": "better",
    }
    assert paired_bootstrap(np.full((2, 5), -0.1)).verdict == "worse"


def test_quantiles_match_the_exact_bootstrap_distribution():
    # three examples, one seed: all 27 equally likely resamples enumerated by hand
    d = np.array([-1.0, 0.0, 2.0])
    exact = np.sort([np.mean(c) for c in itertools.product(d, repeat=3)])
    lo, hi = np.quantile(exact, [0.1, 0.9])
    iv = paired_bootstrap(d[None], n_boot=20000, confidence=0.8, seed=1)
    assert iv.low == pytest.approx(lo, abs=0.34) and iv.high == pytest.approx(hi, abs=0.34)
    # the mean of the resamples is the observed mean; its spread is sd / sqrt(n) (population sd, bootstrap)
    iv95 = paired_bootstrap(np.tile(d, 200)[None], n_boot=4000)
    se = d.std() / np.sqrt(600)
    assert iv95.low == pytest.approx(d.mean() - 1.96 * se, abs=0.02)
    assert iv95.high == pytest.approx(d.mean() + 1.96 * se, abs=0.02)


def test_seeds_are_resampled_too():
    # one example, two seeds that disagree: the same 0 / 0.5 / 1 distribution as two examples
    iv = paired_bootstrap(np.array([[0.0], [1.0]]), n_boot=4000)
    assert (iv.low, iv.high) == (0.0, 1.0)
    # seeds that agree give no seed variance: the interval is the examples' alone
    same = paired_bootstrap(np.array([[0.0, 1.0], [0.0, 1.0]]), n_boot=4000, seed=3)
    assert (same.low, same.high) == (0.0, 1.0)


@pytest.mark.parametrize(
    "diff, kwargs, match",
    [
        (np.zeros(3), {}, "seeds, examples"),
        (np.zeros((1, 0)), {}, "non-empty"),
        (np.zeros((1, 2)), {"confidence": 1.5}, "confidence"),
    ],
)
def test_bad_input(diff, kwargs, match):
    with pytest.raises(ValueError, match=match):
        paired_bootstrap(diff, **kwargs)
