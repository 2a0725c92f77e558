"""`constrained-sft train` with a `task: video` recipe and `eval robustness --task video`, on tiny generated videos."""

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from constrained_sft.cli import main
from constrained_sft.evaluation.bootstrap import Statistic, paired_bootstrap
from constrained_sft.tasks import get_task
from constrained_sft.testing import tiny_videos

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPE = os.path.join(ROOT, "recipes", "dust", "skvideo", "constrained.yaml")


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return tiny_videos(tmp_path_factory.mktemp("videos"))


def _train(videos, out, constraints="descent", architecture="dust"):
    return main(["train", "--config", RECIPE, "--video_source", str(videos), "--video_test", "c", "--video_exclude", "d",
                 "--frame_size", "32", "--clip_frames", "4", "--num_train_epochs", "2", "--per_device_train_batch_size",
                 "8", "--architecture", architecture, "--dictionary_atoms_per_side", "16", "--constraints", constraints,
                 "--output_dir", str(out), "--disable_tqdm", "true", "--eval_noise_gammas", "0.5"])  # fmt: skip


def test_train_and_evaluate_video_denoisers(videos, tmp_path, capsys):
    assert _train(videos, tmp_path / "c") == 0
    assert _train(videos, tmp_path / "e", constraints="none") == 0
    report = json.loads((tmp_path / "c" / "constraints.json").read_text())
    data = json.loads((tmp_path / "c" / "video_data.json").read_text())
    assert data["train"]["videos"] == ["a", "b"] and data["test"]["videos"] == ["c"]
    assert report["noise_sigma_x"] == pytest.approx(data["sigma_x"])  # sigma_x: the clean training pixels' std
    assert "held-out RMSE" in capsys.readouterr().out
    out = tmp_path / "robustness"
    code = main(["eval", "robustness", "--recipe", RECIPE, "--models", str(tmp_path / "c"), str(tmp_path / "e"),
                 "--names", "constrained", "erm", "--output_dir", str(out), "--video_source", str(videos),
                 "--video_test", "c", "--video_exclude", "d", "--frame_size", "32", "--clip_frames", "4", "--seeds", "2",
                 "--gammas", "0", "0.5", "1.0", "1.5"])  # fmt: skip
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    for name in ("constrained", "erm"):
        levels = results["models"][name]["summary"]["levels"]
        assert [r["gamma"] for r in levels] == [0, 0.5, 1.0, 1.5]
        rmse = [r["rmse_mean"] for r in levels]
        assert rmse == sorted(rmse)  # more noise, worse reconstruction
        assert set(levels[0]["layer_rmse"]) == {"1", "2", "3"} and 0 <= levels[0]["descent_share"] <= 1
    diff = results["comparisons"]["constrained - erm"]
    assert {"rmse@0", "rmse@0.5", "rmse@1", "rmse@1.5", "id_rmse", "ood_rmse", "auc", "descent_share"} <= set(diff)
    half = diff["rmse@0.5"]["difference"]
    assert half["low"] <= half["estimate"] <= half["high"]
    assert half["estimate"] == pytest.approx(diff["rmse@0.5"]["constrained"] - diff["rmse@0.5"]["erm"])
    for f in ("results.csv", "report.html", "rmse_vs_gamma.png", "difference_vs_gamma.png", "layer_losses.png",
              "descent_vs_gamma.png", "frames.png"):  # fmt: skip
        assert (out / f).stat().st_size > 0, f
    assert "constrained - erm (95% paired bootstrap" in capsys.readouterr().out


@pytest.mark.parametrize("architecture", ["ut", "vit"])
def test_other_architectures_train_from_a_recipe(videos, tmp_path, architecture):
    extra = [] if architecture == "ut" else ["--vit_hidden_size", "64", "--vit_intermediate_size", "64"]
    argv = ["train", "--config", os.path.join(ROOT, "recipes", architecture, "skvideo", "constrained.yaml"),
            "--video_source", str(videos), "--video_test", "c", "--video_exclude", "d", "--frame_size", "32",
            "--clip_frames", "4", "--num_train_epochs", "2", "--per_device_train_batch_size", "8",
            "--dictionary_atoms_per_side", "16", "--num_layers", "2", "--output_dir", str(tmp_path / "m"),
            "--disable_tqdm", "true", "--eval_noise_gammas", "0.5", *extra]  # fmt: skip
    assert main(argv) == 0
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["model_type"] == {"ut": "constrained-video-ut", "vit": "constrained-vit-denoiser"}[architecture]


def test_rmse_differences_by_hand():
    """RMSE is the root of the squared error pooled over the drawn clips, in grey levels; lower is better."""
    video = get_task("video")
    rmse = Statistic("rmse", lambda s: video.measuring.metric(s)[..., 0], higher_is_better=False)

    def clips(mse):  # per clip: summed squared error of its examples and their count, as [K=1, S, C]
        mse = np.asarray(mse, np.float64)
        return {"loss": 4 * mse[None], "count": np.full_like(mse, 4.0)[None]}

    a, b = np.full((1, 5), 0.04), np.full((1, 5), 0.01)  # RMSE 0.2 -> 51 grey levels; 0.1 -> 25.5
    iv = paired_bootstrap(clips(a), clips(b), [rmse], n_boot=200)["rmse"]
    assert iv.estimate == pytest.approx(25.5) and iv.low == pytest.approx(25.5) and iv.verdict == "worse"
    same = paired_bootstrap(clips(a), clips(a), [rmse], n_boot=200)["rmse"]
    assert same.low == same.high == 0.0 and same.verdict == "same"
    noisy = np.random.default_rng(0).uniform(0.01, 0.05, size=(3, 40))
    iv = paired_bootstrap(clips(noisy * 0.81), clips(noisy), [rmse], n_boot=500)["rmse"]  # RMSE 0.9 x B's
    assert iv.low < iv.estimate < iv.high < 0 and iv.verdict == "better"
    assert iv.estimate == pytest.approx(-0.1 * math.sqrt(noisy.mean()) * 255)


def test_video_recipe_refuses_unknown_architecture(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(Path(RECIPE).read_text().replace("architecture: dust", "architecture: unet"))
    with pytest.raises(ValueError, match="`architecture` must be one of \\['dust', 'ut', 'vit'\\]"):
        main(["train", "--config", str(recipe), "--output_dir", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()
