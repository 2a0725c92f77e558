"""
`constrained-sft train` with the shipped SmolVLM recipes on tiny vision-language models and their images (local JSONL
rows naming PNG files, a parquet of image bytes, a stream), as a user without the Hub would run it; `eval robustness` on the trained models under image
noise. Qwen2.5-VL's processor needs torchvision for its video half, which this machine lacks: it trains and is
evaluated image-only (`data.load_processor`), and the folder it saves is a whole Qwen2.5-VL processor's.
"""

import importlib.util
import json
import logging
import math

import pytest

from constrained_sft.cli import main
from constrained_sft.testing.vlm import image_dataset, write_tiny_vlm

RECIPE = "smolvlm-256m/llava-instruct/constrained"
LORA = "smolvlm-256m/llava-instruct/constrained-lora"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlms")
    return {arch: write_tiny_vlm(root / arch, arch) for arch in ("llava", "gemma3", "idefics3", "qwen2_5_vl")}


def train(folder, out, *extra, recipe=RECIPE, data=None):
    return main(["train", "--config", recipe, "--model_name_or_path", str(folder / "model"), "--dataset_name",
                 str(data or folder / "train.jsonl"), "--eval_size", "4", "--max_steps", "2", "--use_cpu", "true",
                 "--constrained_layers", "1", "2", "--output_dir", str(out), "--disable_tqdm", "true", *extra])  # fmt: skip


@pytest.mark.parametrize(
    ("arch", "recipe"), [("llava", RECIPE), ("gemma3", RECIPE), ("idefics3", RECIPE), ("idefics3", LORA)]
)
def test_the_vlm_recipes_train_a_tiny_vlm_on_local_images(arch, recipe, folders, tmp_path):
    assert train(folders[arch], tmp_path / "run", recipe=recipe) == 0
    report = json.loads((tmp_path / "run" / "constraints.json").read_text())
    assert report["noise_image_sigma_x"] > 0 and report["noise_sigma_x"] > 0  # both modalities, each its own scale
    assert report["noise_image_sigma_x"] != pytest.approx(report["noise_sigma_x"])
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    final = next(r for r in reversed(state["log_history"]) if "eval_layer_loss/2" in r)
    assert all(math.isfinite(final[f"eval_layer_loss/{k}"]) for k in (1, 2))
    assert (tmp_path / "run" / "processor_config.json").exists()  # the processor is saved with the model
    assert (tmp_path / "run" / "adapter_config.json").exists() == (recipe == LORA)


def test_a_streamed_vlm_run_and_a_robustness_curve_under_image_noise(folders, tmp_path):
    folder = folders["idefics3"]
    assert train(folder, tmp_path / "streamed", "--streaming", "true", "--max_train_samples", "8") == 0
    parquet = tmp_path / "images.parquet"  # the images as bytes of datasets' `Image` feature, as a Hub dataset's
    image_dataset(16).to_parquet(parquet)
    assert train(folder, tmp_path / "erm", "--constraints", "none", data=parquet) == 0
    out = tmp_path / "robustness"
    code = main(["eval", "robustness", "--models", str(tmp_path / "streamed"), str(tmp_path / "erm"), "--dataset_name",
                 str(folder / "train.jsonl"), "--eval_size", "4", "--gammas", "0", "2", "--seeds", "1",
                 "--noise_modality", "image", "--bootstrap_samples", "50", "--output_dir", str(out)])  # fmt: skip
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    settings = results["settings"]
    recorded = json.loads((tmp_path / "streamed" / "constraints.json").read_text())["noise_image_sigma_x"]
    assert settings["noise_modality"] == "image" and settings["image_sigma"] == recorded  # the first model's scale
    assert "with images" in settings["description"]
    for name in ("streamed", "erm"):
        levels = results["models"][name]["summary"]["levels"]
        assert levels[0]["loss_mean"] != levels[1]["loss_mean"]  # the image noise reached the model


def test_prompt_completion_rows_with_images_train(folders, tmp_path):
    """TRL's other VLM format: `images` beside conversational `prompt` / `completion` (the loss on the answer)."""
    rows = [json.loads(line) for line in (folders["llava"] / "train.jsonl").read_text().splitlines()]
    data = tmp_path / "pc.jsonl"
    data.write_text("".join(json.dumps({"images": [str(folders["llava"] / p) for p in r["images"]],
                                        "prompt": r["messages"][:1], "completion": r["messages"][1:]}) + "\n"
                            for r in rows))  # fmt: skip
    assert train(folders["llava"], tmp_path / "run", "--dataset_format", "prompt_completion", data=data) == 0
    assert json.loads((tmp_path / "run" / "constraints.json").read_text())["noise_image_sigma_x"] > 0


def test_qwen2_5_vl_without_torchvision_trains_and_is_evaluated_image_only(folders, tmp_path, caplog):
    """Its video processor cannot load here (no torchvision): the run loads the image half, says so, and saves the
    processor as Qwen2.5-VL's own (the video settings it read written back), which `eval robustness` reads again."""
    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed: the processor loads whole")
    folder = folders["qwen2_5_vl"]
    with caplog.at_level(logging.WARNING, logger="constrained_sft.data.processors"):
        assert train(folder, tmp_path / "run") == 0
    assert "video processor not loaded (Qwen2VLVideoProcessor requires the Torchvision library" in caplog.text
    assert json.loads((tmp_path / "run" / "constraints.json").read_text())["noise_image_sigma_x"] > 0
    saved = json.loads((tmp_path / "run" / "processor_config.json").read_text())
    source = json.loads((folder / "model" / "processor_config.json").read_text())
    assert saved["processor_class"] == "Qwen2_5_VLProcessor" and saved["video_processor"] == source["video_processor"]
    out = tmp_path / "robustness"
    code = main(["eval", "robustness", "--models", str(tmp_path / "run"), "--dataset_name", str(folder / "train.jsonl"),
                 "--eval_size", "4", "--gammas", "0", "2", "--seeds", "1", "--noise_modality", "image",
                 "--bootstrap_samples", "50", "--output_dir", str(out)])  # fmt: skip
    assert code == 0
    levels = json.loads((out / "results.json").read_text())["models"]["run"]["summary"]["levels"]
    assert levels[0]["loss_mean"] != levels[1]["loss_mean"]  # the image noise reached Qwen's image features
