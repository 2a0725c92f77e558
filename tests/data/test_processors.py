"""A vision-language model's processor where its video half cannot load (no torchvision): loaded image-only, saved
whole, pickled for data loader workers; refused in one line where its image half cannot load; other errors untouched."""

import copy
import importlib.util
import json
import shutil

import pytest
import torch

from constrained_sft.data import ModelPathError, load_processor, processors, vlm_processor
from constrained_sft.testing.vlm import tiny_image, tiny_vlm_pair, write_tiny_vlm

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchvision") is not None, reason="torchvision is installed: processors load whole"
)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    return write_tiny_vlm(tmp_path_factory.mktemp("qwen"), "qwen2_5_vl", rows=2) / "model"


def test_a_video_half_that_cannot_load_is_left_out_and_written_back_on_save(qwen, tmp_path):
    processor = load_processor(str(qwen))
    assert processor.get_attributes() == ["image_processor", "tokenizer"]
    text = "<|vision_start|><|image_pad|><|vision_end|> s1"
    batch = processor(text=[text], images=[tiny_image(0)], return_tensors="pt")
    built = tiny_vlm_pair("qwen2_5_vl")[1](text=[text], images=[tiny_image(0)], return_tensors="pt")
    assert set(batch) == set(built) and all(torch.equal(batch[k], built[k]) for k in batch)  # the folder's settings
    processor.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "processor_config.json").read_text())
    source = json.loads((qwen / "processor_config.json").read_text())
    assert saved["processor_class"] == "Qwen2_5_VLProcessor"  # the folder is Qwen's, whole where torchvision is
    assert saved["video_processor"] == source["video_processor"]
    # a class made at load time is rebuilt by a module-level maker (what a spawned data loader worker pickles);
    # copy drives the same protocol (`__reduce__`) without a pickle
    maker, _ = processor.__reduce__()
    assert maker is processors.restore and maker.__module__ == "constrained_sft.data.processors"
    again = copy.deepcopy(processor)
    assert type(again) is type(processor) and again.video_settings == processor.video_settings
    assert (
        again(text=[text], images=[tiny_image(0)], return_tensors="pt")["input_ids"].tolist()
        == batch["input_ids"].tolist()
    )


def test_a_hub_folder_of_the_legacy_layout_loads_image_only(qwen, tmp_path):
    """Qwen2.5-VL on the Hub: `preprocessor_config.json` alone, naming the processor class; the video settings read
    from it as transformers reads them."""
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "config.json"):
        shutil.copy(qwen / name, legacy)
    images = json.loads((qwen / "processor_config.json").read_text())["image_processor"]
    (legacy / "preprocessor_config.json").write_text(json.dumps({**images, "processor_class": "Qwen2_5_VLProcessor"}))
    processor = load_processor(str(legacy))
    assert type(processor).__name__ == "ImageOnlyQwen2_5_VLProcessor"
    assert processor.video_settings["patch_size"] == images["patch_size"]


def test_an_image_half_that_cannot_load_is_refused_naming_the_field(tmp_path):
    folder = write_tiny_vlm(tmp_path / "llava", "llava", rows=2) / "model"
    settings = json.loads((folder / "processor_config.json").read_text())
    settings["image_processor"]["image_processor_type"] = "Lfm2VlImageProcessor"  # torchvision only
    (folder / "processor_config.json").write_text(json.dumps(settings))
    with pytest.raises(ModelPathError, match=r"^`--models` .*: its processor cannot load here \(Missing optional "):
        vlm_processor(str(folder), "--models")


def test_other_processor_errors_are_not_reworded(tmp_path):
    folder = write_tiny_vlm(tmp_path / "llava", "llava", rows=2) / "model"
    settings = json.loads((folder / "processor_config.json").read_text())
    del settings["image_processor"]["image_processor_type"]
    settings["image_processor"]["size"] = "wide"
    (folder / "processor_config.json").write_text(json.dumps(settings))
    with pytest.raises(Exception) as raised:
        load_processor(str(folder))
    assert not isinstance(raised.value, ModelPathError)


def test_a_text_model_has_no_processor_to_load(tmp_path):
    from constrained_sft.testing import tiny_causal_lm, tiny_tokenizer

    tiny_causal_lm("llama").save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    assert vlm_processor(str(tmp_path)) is None
