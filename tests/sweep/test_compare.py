"""The comparison's arithmetic on hand-made hits: each statistic's per-example scores average to what
`eval robustness` reports, and the pairs get intervals."""

import numpy as np
import pytest

from constrained_sft.evaluation.metrics import auc
from constrained_sft.sweep.compare import compare_arms, hits_matrix, statistics, table

GAMMAS = [0.0, 0.5, 1.0, 2.0]


def model(bits: list[str], descent: float) -> dict:
    accs = [b.count("1") / len(b) for b in bits]
    return {
        "hits": {str(g): [b] for g, b in zip(GAMMAS, bits, strict=True)},
        "summary": {"levels": [{"accuracy_mean": a} for a in accs], "descent_share": descent},
    }


def test_statistics_average_to_the_reported_numbers():
    bits = ["1111", "1110", "1100", "1000"]
    hits = hits_matrix([model(bits, 0.5)], GAMMAS)
    assert hits.shape == (4, 1, 4)
    stats = statistics(hits, GAMMAS, train_gamma=0.5)
    accs = [1.0, 0.75, 0.5, 0.25]
    assert stats["auc"].mean() == pytest.approx(auc(GAMMAS, accs))
    assert stats["id_accuracy"].mean() == pytest.approx(np.mean(accs[:2]))
    assert stats["ood_accuracy"].mean() == pytest.approx(np.mean(accs[2:]))
    assert stats["accuracy@1"].mean() == 0.5
    assert stats["change 0->2"].mean() == pytest.approx(-0.75)  # accuracy lost from clean inputs to the largest gamma


def test_pairs_get_differences_with_intervals_and_a_table():
    results = {
        "settings": {"gammas": GAMMAS, "train_gamma": 0.5},
        "models": {
            "c/seed0": model(["1111", "1111", "1111", "1111"], 0.9),
            "c/seed1": model(["1111", "1111", "1111", "1110"], 0.8),
            "e/seed0": model(["1111", "1111", "0000", "0000"], 0.5),
            "e/seed1": model(["1111", "1111", "0000", "0001"], 0.5),
        },
    }
    out = compare_arms(results, [("c", "e")], seeds=2, n_boot=500)["c - e"]
    assert out["id_accuracy"]["difference"]["estimate"] == 0 and out["id_accuracy"]["difference"]["verdict"] == "same"
    ood = out["ood_accuracy"]["difference"]
    assert ood["estimate"] == pytest.approx((1 - 1 / 16) - 1 / 16) and ood["verdict"] == "better"
    assert out["descent_share"] == {"c": pytest.approx(0.85), "e": 0.5}
    assert "| c - e | ood_accuracy | 0.9375 | 0.0625 | +0.8750 [" in table({"c - e": out})
