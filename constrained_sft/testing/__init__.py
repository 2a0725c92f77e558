"""
Tiny offline building blocks for tests, examples and benchmarks: a word-level tokenizer with a chat template,
small random causal LMs of several architectures, tiny encoder classifiers (BERT, DistilBERT, RoBERTa), and a
learnable synthetic prompt-completion task, tiny generated videos (`write_video`), and the assets of the GPU study's
CPU rehearsal (`study_assets`, `python -m constrained_sft.testing study-assets ROOT`: `benchmarks/gpu_study.sh --smoke`).
Tiny vision-language models with their processors: `testing.vlm`.

May import: nothing of the package (tests, examples and benchmarks build on it; the package does not).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import transformers
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
SYMBOLS = [f"s{i}" for i in range(24)]
WORDS = ["user:", "assistant:", "=", "next"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] + ': ' + message['content'] + ' ' }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer over `SYMBOLS` and a few words, built offline (vocabulary 32)."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + WORDS + SYMBOLS)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def decoder_fields(num_layers: int, hidden: int, vocab: int) -> dict:
    """Config fields of a tiny Llama-like text decoder, shared by every builder here."""
    return dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )


def tiny_causal_lm(
    arch: str = "llama", num_layers: int = 4, hidden: int = 32, vocab: int = 32, seed: int = 0, **overrides
):
    """A random causal LM built from a config: `arch` in llama, qwen2, mistral, gpt2, lfm2. No dropout."""
    transformers.set_seed(seed)
    config: transformers.PretrainedConfig
    if arch == "gpt2":
        config = transformers.GPT2Config(
            n_embd=hidden,
            n_layer=num_layers,
            n_head=4,
            n_positions=256,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            vocab_size=vocab,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            **overrides,
        )
    elif arch == "lfm2":  # its final norm is `embedding_norm`: found by what it does, not by its name
        layer_types = ["conv" if i % 2 == 0 else "full_attention" for i in range(num_layers)]
        config = transformers.Lfm2Config(
            **{**decoder_fields(num_layers, hidden, vocab), "layer_types": layer_types, **overrides}
        )
    else:
        cls = {
            "llama": transformers.LlamaConfig,
            "qwen2": transformers.Qwen2Config,
            "mistral": transformers.MistralConfig,
        }
        config = cls[arch](
            **{**decoder_fields(num_layers, hidden, vocab), **overrides}
        )  # an override replaces a default
    return transformers.AutoModelForCausalLM.from_config(config)


def tiny_vlm(arch: str = "llava", num_layers: int = 4, hidden: int = 32, vocab: int = 40, seed: int = 0):
    """
    A random vision-language model built from a config, `arch` in llava (Llama text, CLIP vision) and gemma3 (Gemma3
    text, SigLIP vision): its text decoder, and so its final norm, sits at `model.language_model`. Trained here on
    text alone, as TRL's VLM tests do when no image is given. Token `vocab - 1` is the image token.
    """
    transformers.set_seed(seed)
    text = decoder_fields(num_layers, hidden, vocab)
    vision: Mapping[str, Any] = dict(  # the vision configs' keywords
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=8
    )
    if arch == "llava":
        llava = transformers.LlavaConfig(
            text_config=transformers.LlamaConfig(**text),
            vision_config=transformers.CLIPVisionConfig(**vision, patch_size=4),
            image_token_index=vocab - 1,
        )
        return transformers.LlavaForConditionalGeneration(llava)
    config = transformers.Gemma3Config(
        text_config=transformers.Gemma3TextConfig(**text, head_dim=hidden // 4),
        vision_config=transformers.SiglipVisionConfig(**vision, patch_size=4),
        mm_tokens_per_image=4,
        image_token_index=vocab - 1,
    )
    return transformers.Gemma3ForConditionalGeneration(config)


def successor_dataset(n: int = 256, length: int = 6, seed: int = 0) -> Dataset:
    """
    Prompt-completion rows: a random start symbol and step; the completion continues the arithmetic sequence
    modulo the alphabet. Needs attention to the prompt (the step), so a few layers have to cooperate.
    """
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        start, step = rng.randrange(len(SYMBOLS)), rng.randrange(1, 4)
        seq = [SYMBOLS[(start + i * step) % len(SYMBOLS)] for i in range(length + 2)]
        rows.append({"prompt": " ".join(seq[:2]) + " =", "completion": " " + " ".join(seq[2:])})
    return Dataset.from_list(rows)


def presence_dataset(n: int = 128, seed: int = 0, length: int = 10) -> Dataset:
    """Tokenized classification rows for `tiny_encoder`: label 1 iff token 10 occurs, learnable in a few steps."""
    import torch

    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        ids = torch.randint(11, 32, (length,), generator=g)
        label = int(torch.rand(1, generator=g) < 0.5)
        if label:
            ids[torch.randint(1, length, (1,), generator=g)] = 10
        rows.append({"input_ids": [2, *ids.tolist()], "attention_mask": [1] * (length + 1), "labels": label})
    return Dataset.from_list(rows)


def tiny_encoder(arch="bert", num_labels=2, layers=4, seed=0):
    """A random encoder classifier without dropout, so runs compare exactly."""
    transformers.set_seed(seed)
    common = dict(vocab_size=32, num_labels=num_labels, pad_token_id=0)
    config: transformers.PreTrainedConfig
    if arch == "distilbert":
        config = transformers.DistilBertConfig(
            dim=32,
            hidden_dim=64,
            n_layers=layers,
            n_heads=4,
            max_position_embeddings=64,
            dropout=0.0,
            attention_dropout=0.0,
            seq_classif_dropout=0.0,
            **common,
        )
    else:
        cls = {"bert": transformers.BertConfig, "roberta": transformers.RobertaConfig}[arch]
        config = cls(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=layers,
            num_attention_heads=4,
            max_position_embeddings=80,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            **common,
        )
    return transformers.AutoModelForSequenceClassification.from_config(config)


def write_video(path, level: int, frames: int = 12, size: tuple[int, int] = (40, 24)) -> str:
    """A tiny mp4 (MPEG-4 part 2, encoded with PyAV) of `frames` frames of grey level `level` crossed by a moving bar
    of the opposite level: a video with known brightness, for loader and denoiser tests."""
    import os

    import av
    import numpy as np

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for t in range(frames):
            rgb = np.full((size[1], size[0], 3), level, np.uint8)
            rgb[:, (2 * t) % size[0]] = 255 - level
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


def tiny_videos(root, frames: int = 16, size: tuple[int, int] = (48, 40)) -> str:
    """Four tiny mp4s `a`..`d` in `root` (grey levels 60, 120, 180, 240): train on a and b, test on c, leave out d
    (`video_test: [c]`, `video_exclude: [d]`)."""
    import os

    for name, level in (("a", 60), ("b", 120), ("c", 180), ("d", 240)):
        write_video(os.path.join(root, f"{name}.mp4"), level, frames=frames, size=size)
    return str(root)


def sharegpt_rows(n: int = 96) -> list[dict]:
    """`n` ShareGPT conversations of the successor task (`s3 s1 =` -> `s4 s1`), where, as in real ShareGPT, some first
    exchanges have no answer (every 16th from the 6th: two user turns, or an empty reply), which training skips."""

    def reply(i: int) -> dict[str, str]:
        if i % 16 != 5:
            return {"from": "gpt", "value": f"s{(i % 24 + 1) % 24} s{i // 24}"}
        return {"from": "human", "value": "s1 ="} if i % 32 == 5 else {"from": "gpt", "value": " "}

    return [
        {"id": str(i), "conversations": [{"from": "human", "value": f"s{i % 24} s{i // 24} ="}, reply(i)]}
        for i in range(n)
    ]


def study_assets(root) -> str:
    """What `benchmarks/gpu_study.sh --smoke` studies on CPU, written under `root`: `model/` (a 30-layer tiny Llama, the
    shipped SmolLM2 recipes' layer count), `encoder/` (the proxy judge's encoder) and `sharegpt.json` (96
    conversations, 6 without an answer)."""
    import json
    import os

    os.makedirs(root, exist_ok=True)
    tiny_causal_lm("llama", num_layers=30, hidden=16, seed=1).save_pretrained(os.path.join(root, "model"))
    tiny_tokenizer().save_pretrained(os.path.join(root, "model"))
    tiny_encoder("bert", layers=2).save_pretrained(os.path.join(root, "encoder"))
    tiny_tokenizer().save_pretrained(os.path.join(root, "encoder"))
    with open(os.path.join(root, "sharegpt.json"), "w", encoding="utf-8") as f:
        json.dump(sharegpt_rows(), f)
    return str(root)
