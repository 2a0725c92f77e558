"""
The task layer changed how every number is computed (one level loop, one bootstrap, one report) but not the numbers:
a fixed tiny run (`pinned_assets`) gives what the evaluation gave before it (`pinned_numbers.json`, recorded at
commit 6817a4b by the code of 1b5c57c). Two deliberate changes, each checked here against its definition instead:
- video ID / OOD differences are now the mean over levels of the per-level RMSE difference, like every task's ID /
  OOD statistic and like the summaries' `id_rmse`; before, they were the RMSE of the squared errors pooled across
  the levels, dominated by the noisiest level (for these models -0.44 where the summaries said -1.80);
- the one bootstrap draws its resamples in chunks; the video code drew them all at once. With one training seed per
  arm (here) the draws coincide, so the intervals are unchanged too; with several seeds per arm the endpoints of a
  video interval would move within Monte Carlo error.
"""

import json
import os

import pytest
from pinned_assets import (
    GAMMAS,
    VIDEO_GAMMAS,
    classification_assets,
    sft_assets,
    video_assets,
    video_data_fields,
)

from constrained_sft.data import ClassificationDataArguments, DataArguments
from constrained_sft.data.video import VideoDataArguments
from constrained_sft.evaluation import RobustnessArguments, run

with open(os.path.join(os.path.dirname(__file__), "pinned_numbers.json")) as f:
    PINNED = json.load(f)
# Every number here comes from float32 forward passes. Another CPU (its BLAS kernels, its SIMD width) moves the last
# float32 digits (a fresh machine gave the video ID RMSE 1.6e-8 relative away from this one's), and the statistics sum
# a few hundred such values, so 1e-5 relative is what float32 can promise; a changed computation moves them by far more.
# (Accuracies are ratios of counts: exact unless another machine's rounding flips an argmax, which none has here.)
FLOAT32 = dict(rel=1e-5, abs=1e-6)


# Video errors are differences of pixels (~1e2) that agree to ~1: the cancellation multiplies float32's rounding by
# ~1e2-1e3, and this machine's layer-1 RMSE came out 6e-5 relative away from the pinned one. So video numbers are
# pinned at 5e-4 relative. Worse, the tiny video models' layers differ by only ~1e-4 relative (`ratio_median` 0.99996),
# so whether a clip's layer step descends (`descent_share`) is not fixed by float32 arithmetic at all (this machine:
# 0.75 / 0.19 at gamma 0 / 0.5 where the pins say 0.81 / 0.27): it is checked for range, not pinned.
PIXELS = dict(rel=5e-4, abs=1e-6)
NEAR_TIES = {"descent_share": dict(abs=1.0), "ratio_median": dict(rel=1e-3)}


def check_summary(new: dict, old: dict, key: str, tolerance: dict = FLOAT32, unpinned: dict | None = None) -> None:
    unpinned = unpinned or {}
    for name in ("auc", f"id_{key}", f"ood_{key}", "descent_share"):
        if name in old:
            assert new[name] == pytest.approx(old[name], **unpinned.get(name, tolerance)), name
    for n, o in zip(new["levels"], old["levels"], strict=True):
        for field, value in o.items():
            assert n[field] == pytest.approx(value, **unpinned.get(field, tolerance)), (o["gamma"], field)
        assert 0.0 <= n["descent_share"] <= 1.0


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("pinned")


def test_classification_numbers_and_intervals_are_unchanged(root):
    assets = classification_assets(str(root))
    arms = [f"{arm}={','.join(paths)}" for arm, paths in assets["models"].items()]
    args = RobustnessArguments(
        task="classification", arm=arms, output_dir=str(root / "c-out"), gammas=GAMMAS, seeds=1, batch_size=16,
        bootstrap_samples=500,
    )  # fmt: skip
    results = run(
        args, ClassificationDataArguments(dataset_name=assets["data"], max_seq_length=16)
    ).to_dict()  # the saved (JSON) form
    old = PINNED["classification"]
    assert results["settings"]["sigma_x"] == pytest.approx(old["sigma_x"], **FLOAT32)
    for new_name, old_name in zip(results["models"], old["summaries"], strict=True):
        check_summary(results["models"][new_name]["summary"], old["summaries"][old_name], "accuracy")
    new = results["comparisons"]["a - b"]
    assert set(new) == set(old["comparison"])
    for stat, row in old["comparison"].items():
        assert new[stat]["a"] == pytest.approx(row["a"], **FLOAT32) and new[stat]["b"] == pytest.approx(
            row["b"], **FLOAT32
        )
        if stat == "descent_share":  # had no interval before
            assert (
                new[stat]["difference"]["low"]
                <= new[stat]["difference"]["estimate"]
                <= new[stat]["difference"]["high"]
            )
            continue
        assert new[stat]["seed_std"] == pytest.approx(row["seed_std"], **FLOAT32)
        for field in ("estimate", "low", "high"):
            assert new[stat]["difference"][field] == pytest.approx(row["difference"][field], **FLOAT32), (stat, field)
        assert new[stat]["difference"]["verdict"] == row["difference"]["verdict"]


def test_sft_numbers_are_unchanged_and_now_have_intervals(root):
    assets = sft_assets(str(root))
    args = RobustnessArguments(
        models=assets["models"], names=["a", "b"], output_dir=str(root / "s-out"), gammas=GAMMAS, seeds=2,
        batch_size=8, max_length=64, bootstrap_samples=500,
    )  # fmt: skip
    results = run(args, DataArguments(dataset_name=assets["data"], eval_size=12)).to_dict()  # the saved (JSON) form
    old = PINNED["sft"]
    assert results["settings"]["sigma_x"] == pytest.approx(old["sigma_x"], **FLOAT32)
    for name in ("a", "b"):
        check_summary(results["models"][name]["summary"], old["summaries"][name], "accuracy")
    new = results["comparisons"]["a - b"]
    for stat in ("auc", "id_accuracy", "ood_accuracy", "descent_share"):  # before: point differences only
        assert new[stat]["difference"]["estimate"] == pytest.approx(old["differences"][stat], **FLOAT32), stat
    for row in old["differences"]["per_gamma"]:
        diff = new[f"accuracy@{row['gamma']:g}"]["difference"]
        assert diff["estimate"] == pytest.approx(row["accuracy"], **FLOAT32)
        assert diff["low"] <= diff["estimate"] <= diff["high"] and diff["verdict"] in ("better", "same", "worse")


def test_video_numbers_are_unchanged(root):
    assets = video_assets(str(root))
    args = RobustnessArguments(
        task="video", models=assets["models"], names=["a", "b"], output_dir=str(root / "v-out"), gammas=VIDEO_GAMMAS,
        seeds=2, batch_size=64,
    )  # fmt: skip
    results = run(args, VideoDataArguments(**video_data_fields(assets["videos"]))).to_dict()  # the saved (JSON) form
    old = PINNED["video"]
    assert results["settings"]["sigma_x"] == pytest.approx(old["sigma_x"], **FLOAT32)
    for name in ("a", "b"):
        check_summary(results["models"][name]["summary"], old["summaries"][name], "rmse", PIXELS, NEAR_TIES)
    new = results["comparisons"]["a - b"]
    for row in old["differences"]["per_gamma"]:
        diff = new[f"rmse@{row['gamma']:g}"]["difference"]
        # a difference of two RMSEs is as exact as the RMSEs themselves: PIXELS relative to their size
        size = max(
            lv["rmse_mean"] for n in ("a", "b") for lv in old["summaries"][n]["levels"] if lv["gamma"] == row["gamma"]
        )
        for field in ("estimate", "low", "high"):
            assert diff[field] == pytest.approx(row[field], abs=PIXELS["rel"] * size), (row["gamma"], field)
        assert diff["verdict"] == row["verdict"]
    summaries = {n: results["models"][n]["summary"] for n in ("a", "b")}
    for key in ("id", "ood"):  # now the mean of per-level differences, as the summaries define ID / OOD RMSE
        stat = new[f"{key}_rmse"]
        assert stat["difference"]["estimate"] == pytest.approx(stat["a"] - stat["b"], **FLOAT32)  # the same numbers
        assert stat["a"] == pytest.approx(summaries["a"][f"{key}_rmse"], rel=2e-3)  # noise seeds pooled, not averaged
