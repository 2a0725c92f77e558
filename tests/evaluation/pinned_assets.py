"""
The fixed tiny run whose numbers `test_pinned_numbers.py` pins: untrained tiny models built from seeds (no training,
so nothing but the evaluation arithmetic can move the numbers) and generated data. `pinned_numbers.json` was written
by the evaluation code as it was before the task layer (commit 1b5c57c) on these assets.
"""

from __future__ import annotations

import json
import os

import torch
from datasets import Dataset

from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_encoder, tiny_tokenizer, tiny_videos

GAMMAS = [0.0, 0.5, 1.0, 2.0]
VIDEO_GAMMAS = [0.0, 0.5, 1.0, 1.5]
CLASSIFIERS = {"a": (0, 1), "b": (2, 3)}  # arm -> the seeds of its two models (paired by position)


def review_rows(n: int, offset: int) -> list[dict]:
    """Label 1 iff the text ends in s3; texts are unique per index."""
    return [
        {"text": " ".join(f"s{(i * 7 + j) % 24}" for j in range(5)) + f" s{i % 7 + 10}" + (" s3" if i % 2 else " s5"),
         "label": ["neg", "pos"][i % 2]}
        for i in range(offset, offset + n)
    ]  # fmt: skip


def _report(path, **fields) -> None:
    with open(os.path.join(path, "constraints.json"), "w") as f:
        json.dump({"noise_gamma": 0.5, **fields}, f)


def classification_assets(root) -> dict:
    """{'models': {arm: [folder, folder]}, 'data': folder} under `root`."""
    models = {}
    for arm, seeds in CLASSIFIERS.items():
        models[arm] = []
        for seed in seeds:
            path = os.path.join(root, f"clf-{arm}-seed{seed}")
            tiny_encoder("bert", layers=3, seed=seed).save_pretrained(path)
            tiny_tokenizer().save_pretrained(path)
            _report(path)
            models[arm].append(path)
    data = os.path.join(root, "reviews")
    os.makedirs(data, exist_ok=True)
    Dataset.from_list(review_rows(32, 0)).to_csv(os.path.join(data, "train.csv"))
    Dataset.from_list(review_rows(40, 1000)).to_csv(os.path.join(data, "test.csv"))
    return {"models": models, "data": data}


def sft_assets(root) -> dict:
    models = []
    for seed in (3, 4):
        path = os.path.join(root, f"lm-seed{seed}")
        tiny_causal_lm("llama", seed=seed).save_pretrained(path)
        tiny_tokenizer().save_pretrained(path)
        _report(path, layers=[2, 3, 4])
        models.append(path)
    data = os.path.join(root, "rows.jsonl")
    with open(data, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in successor_dataset(40, seed=5))
    return {"models": models, "data": data}


def video_assets(root) -> dict:
    from constrained_sft.models import DUSTConfig, DUSTForDenoising

    videos = tiny_videos(os.path.join(root, "videos"))
    models = []
    for i in range(2):
        model = DUSTForDenoising(DUSTConfig(dictionary_atoms_per_side=16, num_hidden_layers=3, data_std=0.2))
        if i:  # the second model: dictionaries moved off the DCT start by seeded noise
            generator = torch.Generator().manual_seed(1)
            with torch.no_grad():
                for d in model.dictionaries:
                    d.add_(0.003 * torch.randn(d.shape, generator=generator))
        path = os.path.join(root, f"dust-{i}")
        model.save_pretrained(path)
        _report(path)
        models.append(path)
    return {"models": models, "videos": videos}


def video_data_fields(videos) -> dict:
    return dict(video_source=videos, video_test=["c"], video_exclude=["d"], frame_size=32, clip_frames=4)
