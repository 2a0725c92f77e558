"""
Tiny vision-language models built offline with their own processor classes, for tests, the VLM guide and the CPU
demo: LLaVA (Llama text, CLIP vision), Gemma 3 (SigLIP), Qwen2.5-VL and Idefics3 (the SmolVLM architecture), each a
2-layer text decoder of width 32 over the word-level vocabulary of `tiny_tokenizer` plus the family's image
tokens, and a 1-layer vision tower on 8x8 (Idefics3: 16x16) images that becomes 4 image-feature positions per image.
Images are seeded crops of the photographs scikit-image ships (`tiny_image`; scikit-image is a dev dependency).

    python -m constrained_sft.testing tiny-vlm DIR --arch idefics3   # a model + processor folder, train.jsonl, images

Qwen2.5-VL's processor holds a video processor, which needs torchvision; torchvision has no CPU wheel on PyPI that
loads with a CPU torch, so `tiny_vlm_pair("qwen2_5_vl")` builds Qwen's processor class without its video half
(`ImageOnlyQwen2_5_VLProcessor`). Its folder is a Qwen2.5-VL folder; without torchvision the library loads it
image-only (`constrained_sft.data.load_processor`), `AutoProcessor` alone does not.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from datasets import Dataset
from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from . import SPECIALS, SYMBOLS, WORDS, decoder_fields

VLM_ARCHS = ("llava", "gemma3", "qwen2_5_vl", "idefics3")
# what a chat template writes for an image part (the processor expands it into the image's feature positions)
IMAGE_TEXT = {
    "llava": "<image>",
    "gemma3": "<start_of_image>",
    "qwen2_5_vl": "<|vision_start|><|image_pad|><|vision_end|>",
    "idefics3": "<image>",
}
IMAGE_TOKENS = {  # the family's own special tokens, appended to the word vocabulary
    "llava": ["<image>"],
    "gemma3": ["<start_of_image>", "<end_of_image>", "<image_soft_token>"],
    "qwen2_5_vl": ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"],
    "idefics3": ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"],
}


def vlm_chat_template(image_text: str) -> str:
    """`CHAT_TEMPLATE` for multimodal messages: a content list's image parts become `image_text`."""
    return (
        "{% for message in messages %}{{ message['role'] + ': ' }}"
        "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}{{ '" + image_text + "' }}{% elif part['type'] == 'text' %}"
        "{{ part['text'] }}{% endif %}{% endfor %}{% endif %}{{ ' ' }}"
        "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
    )


def vlm_tokenizer(arch: str) -> PreTrainedTokenizerFast:
    """The word-level tokenizer with `arch`'s image tokens as special tokens (split out of any text)."""
    extra = IMAGE_TOKENS[arch]
    vocab = {tok: i for i, tok in enumerate(SPECIALS + WORDS + SYMBOLS + extra)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    names = ("boi_token", "eoi_token", "image_token")  # Gemma 3's processor reads these from its tokenizer
    named = {"extra_special_tokens": dict(zip(names, extra, strict=True))} if arch == "gemma3" else {}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", **named
    )
    tokenizer.add_tokens(extra, special_tokens=True)
    tokenizer.chat_template = vlm_chat_template(IMAGE_TEXT[arch])
    return tokenizer


class ImageOnlyQwen2_5_VLProcessor(transformers.Qwen2_5_VLProcessor):
    """Qwen2.5-VL's processor without its video processor (which needs torchvision): images and text only. Saved, it
    is a Qwen2.5-VL folder: `Qwen2_5_VLProcessor`, its video processor's settings those of its image processor (as
    a Hub folder's legacy `preprocessor_config.json` gives them); where torchvision is missing it loads through
    `constrained_sft.data.load_processor`, image-only."""

    def __init__(
        self, image_processor: Any = None, tokenizer: Any = None, chat_template: str | None = None, **kwargs: Any
    ) -> None:
        self.image_token, self.video_token = "<|image_pad|>", "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        transformers.ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    def to_dict(self) -> dict[str, object]:
        saved = {**super().to_dict(), "processor_class": "Qwen2_5_VLProcessor"}
        return {**saved, "video_processor": self.image_processor.to_dict()}


def tiny_vlm_pair(arch: str = "llava", seed: int = 0, num_layers: int = 2, hidden: int = 32) -> tuple[Any, Any]:
    """(model, processor) of `arch` in `VLM_ARCHS`, random, no dropout, built from configs offline."""
    transformers.set_seed(seed)
    tokenizer = vlm_tokenizer(arch)
    ids: dict[str, int] = {tok: len(SPECIALS + WORDS + SYMBOLS) + i for i, tok in enumerate(IMAGE_TOKENS[arch])}
    text = decoder_fields(num_layers, hidden, len(tokenizer))
    vision: Mapping[str, Any] = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    template = tokenizer.chat_template
    model: Any
    config: Any
    images: Any
    processor: Any
    if arch == "llava":
        config = transformers.LlavaConfig(
            text_config=transformers.LlamaConfig(**text),
            vision_config=transformers.CLIPVisionConfig(**vision, image_size=8, patch_size=4),
            image_token_index=ids["<image>"],
        )
        model = transformers.LlavaForConditionalGeneration(config)
        images = transformers.CLIPImageProcessorPil(size={"shortest_edge": 8}, crop_size={"height": 8, "width": 8})
        processor = transformers.LlavaProcessor(
            image_processor=images,
            tokenizer=tokenizer,
            patch_size=4,
            vision_feature_select_strategy="default",
            num_additional_image_tokens=1,
            chat_template=template,
        )
    elif arch == "gemma3":
        config = transformers.Gemma3Config(
            text_config=transformers.Gemma3TextConfig(**text, head_dim=hidden // 4),
            vision_config=transformers.SiglipVisionConfig(**vision, image_size=8, patch_size=4),
            mm_tokens_per_image=4,
            image_token_index=ids["<image_soft_token>"],
            boi_token_index=ids["<start_of_image>"],
            eoi_token_index=ids["<end_of_image>"],
        )
        model = transformers.Gemma3ForConditionalGeneration(config)
        # Gemma 3 initialises its projection to zeros (checkpoints replace it): random here, so images have features
        torch.nn.init.normal_(model.model.multi_modal_projector.mm_input_projection_weight, std=0.5)
        images = transformers.Gemma3ImageProcessorPil(size={"height": 8, "width": 8})
        processor = transformers.Gemma3Processor(
            image_processor=images, tokenizer=tokenizer, image_seq_length=4, chat_template=template
        )
    elif arch == "qwen2_5_vl":
        rope = {"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0}  # sums to head_dim / 2
        config = transformers.Qwen2_5_VLConfig(
            text_config={**text, "rope_parameters": rope},
            vision_config=dict(
                depth=1,
                hidden_size=16,
                intermediate_size=32,
                num_heads=2,
                patch_size=2,
                spatial_merge_size=2,
                temporal_patch_size=2,
                out_hidden_size=hidden,
                fullatt_block_indexes=[0],
                window_size=8,
            ),
            image_token_id=ids["<|image_pad|>"],
            video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"],
            vision_end_token_id=ids["<|vision_end|>"],
        )
        model = transformers.Qwen2_5_VLForConditionalGeneration(config)
        images = transformers.Qwen2VLImageProcessorPil(
            patch_size=2, merge_size=2, temporal_patch_size=2, min_pixels=64, max_pixels=64
        )
        processor = ImageOnlyQwen2_5_VLProcessor(image_processor=images, tokenizer=tokenizer, chat_template=template)
    elif arch == "idefics3":
        config = transformers.Idefics3Config(
            text_config=transformers.LlamaConfig(**text),
            vision_config=transformers.Idefics3VisionConfig(**vision, image_size=16, patch_size=4),
            scale_factor=2,
            image_token_id=ids["<image>"],
        )
        model = transformers.Idefics3ForConditionalGeneration(config)
        images = transformers.Idefics3ImageProcessorPil(
            size={"longest_edge": 16}, max_image_size={"longest_edge": 16}, do_image_splitting=False
        )
        processor = transformers.Idefics3Processor(
            image_processor=images, tokenizer=tokenizer, image_seq_len=4, chat_template=template
        )
    else:
        raise ValueError(f"`arch` must be one of {list(VLM_ARCHS)}, got {arch!r}.")
    return model, processor


PHOTOGRAPHS = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png", "retina.jpg")


def photograph(name: str) -> Image.Image:
    """One of the photographs the `scikit-image` package ships (a dev dependency; the file is read, the package is
    not imported), as RGB."""
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the test images are scikit-image's photographs: pip install scikit-image")
    with Image.open(Path(spec.submodule_search_locations[0]) / "data" / name) as image:
        return image.convert("RGB")


def tiny_image(seed: int, size: tuple[int, int] = (24, 20)) -> Image.Image:
    """A seeded `size` (width, height) crop of a scikit-image photograph (`PHOTOGRAPHS[seed % 6]`), a quarter of the
    photograph's shorter side wide, at a seeded place, resized: real image statistics, different features per seed."""
    rng = np.random.default_rng(seed)
    photo = photograph(PHOTOGRAPHS[seed % len(PHOTOGRAPHS)])
    side = min(photo.size) // 4
    x, y = (int(rng.integers(0, extent - side + 1)) for extent in photo.size)
    return photo.crop((x, y, x + side, y + side)).resize(size, Image.Resampling.BILINEAR)


def image_rows(n: int = 8, seed: int = 0, images: list[Any] | None = None) -> list[dict[str, object]]:
    """
    `n` rows in TRL's VLM format, `images` + multimodal `messages`: the user shows an image and gives two symbols,
    the assistant answers the next one. `images`: what each row holds (a PIL image, or a file path for the CLI's
    local files), default `tiny_image(seed + i)`.
    """
    rows = []
    for i in range(n):
        a, step = (seed + i) % len(SYMBOLS), 1 + i % 3
        symbols = [SYMBOLS[(a + k * step) % len(SYMBOLS)] for k in range(3)]
        rows.append(
            {
                "images": [images[i] if images is not None else tiny_image(seed + i)],
                "messages": [
                    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " ".join(symbols[:2])}]},
                    {"role": "assistant", "content": [{"type": "text", "text": symbols[2]}]},
                ],
            }
        )
    return rows


def image_dataset(n: int = 8, seed: int = 0) -> Dataset:
    """`image_rows` as a `datasets.Dataset` (its `images` column of the `Image` feature)."""
    return Dataset.from_list(image_rows(n, seed))


def write_tiny_vlm(folder: str | Path, arch: str = "idefics3", rows: int = 16, seed: int = 0) -> Path:
    """
    `folder`/model (the tiny model and its processor, saved) and `folder`/train.jsonl, whose rows name their images
    by path (`folder`/images/<i>.png), as a user's local VLM data would. Returns `folder`.
    """
    folder = Path(folder)
    model, processor = tiny_vlm_pair(arch, seed)
    model.save_pretrained(folder / "model")
    processor.save_pretrained(folder / "model")
    (folder / "images").mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(rows):
        path = folder / "images" / f"{i}.png"
        tiny_image(seed + i).save(path)
        paths.append(f"images/{i}.png")
    with open(folder / "train.jsonl", "w") as out:
        for row in image_rows(rows, seed, images=paths):
            out.write(json.dumps(row) + "\n")
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m constrained_sft.testing tiny-vlm", description=write_tiny_vlm.__doc__
    )
    parser.add_argument("folder")
    parser.add_argument("--arch", default="idefics3", choices=list(VLM_ARCHS))
    parser.add_argument("--rows", type=int, default=16)
    args = parser.parse_args(argv)
    try:
        print(write_tiny_vlm(args.folder, args.arch, args.rows))
    except ModuleNotFoundError as missing:
        parser.error(str(missing))
