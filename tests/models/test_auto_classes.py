"""
The promise of `constrained_sft.models`: every model class the library defines, saved, reloads through transformers'
Auto classes after a bare `import constrained_sft` in a fresh interpreter (the package's import is lazy: the
registration happens when transformers loads its AutoConfig module, or at once if it already has), with the same
weights and outputs, whatever the order of the imports; and a bare import still loads no torch.
"""

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import hang_limit

from constrained_sft.models import (
    DUSTConfig,
    DUSTForDenoising,
    PooledLinearForSequenceClassification,
    UTConfig,
    UTForSequenceClassification,
    UTModel,
    VideoUTConfig,
    VideoUTForDenoising,
    ViTDenoiserConfig,
    ViTForDenoising,
)
from constrained_sft.testing import tiny_encoder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _models(tmp_path):
    """{name: (Auto class, model, input)} of every class, tiny."""
    torch.manual_seed(0)
    encoder = tmp_path / "encoder"
    tiny_encoder("bert", layers=2).save_pretrained(encoder)
    ids = {"input_ids": torch.tensor([[2, 11, 12, 13]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    ut = UTConfig(vocab_size=32, hidden_size=8, num_hidden_layers=2, num_labels=2)
    pixels = {"input_values": torch.rand(1, 4, 64)}
    vit = ViTDenoiserConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                            image_size=16, patch_size=8, num_channels=1, frame_size=16, data_std=0.2)  # fmt: skip
    return {
        "pooled_linear": ("AutoModelForSequenceClassification",
                          PooledLinearForSequenceClassification.from_encoder(str(encoder), 2, "mean"), ids),
        "ut_classifier": ("AutoModelForSequenceClassification", UTForSequenceClassification(ut), ids),
        "ut": ("AutoModel", UTModel(ut), ids),
        "dust": ("AutoModel", DUSTForDenoising(DUSTConfig(patch_size=8, dictionary_atoms_per_side=10,
                                                          num_hidden_layers=2, data_std=0.2)), pixels),
        "video_ut": ("AutoModel", VideoUTForDenoising(VideoUTConfig(patch_size=8, dictionary_atoms_per_side=8,
                                                                    num_hidden_layers=2, data_std=0.2)), pixels),
        "vit": ("AutoModel", ViTForDenoising(vit), pixels),
    }  # fmt: skip


RELOAD = """
import json, sys
import constrained_sft
assert "torch" not in sys.modules, "a bare import loaded torch"
{then}
import torch, transformers
cases = json.loads(sys.argv[1])
out = {{}}
for name, (auto, folder, inputs) in cases.items():
    model = getattr(transformers, auto).from_pretrained(folder).eval()
    with torch.no_grad():
        result = model(**{{k: torch.tensor(v) for k, v in inputs.items()}})
    out[name] = [type(model).__name__, result["logits" if "logits" in result else "last_hidden_state"].tolist()]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("auto")
    cases, expected = {}, {}
    for name, (auto, model, inputs) in _models(tmp_path).items():
        model.eval().save_pretrained(tmp_path / name)
        with torch.no_grad():
            result = model(**inputs)
        first = result["logits" if "logits" in result else "last_hidden_state"]  # logits / reconstruction / states
        cases[name] = [auto, str(tmp_path / name), {k: v.tolist() for k, v in inputs.items()}]
        expected[name] = [type(model).__name__, first.tolist()]
    return cases, expected


@pytest.mark.parametrize(
    "then",
    ["", "from transformers import AutoConfig", "from transformers import ViTModel"],
    ids=["auto-class-first", "autoconfig-first", "modeling-first"],
)
def test_every_model_class_reloads_with_the_auto_classes_after_a_bare_import(saved, then):
    """`then`: what the user imports between the package and the Auto class (each loads transformers' Auto modules
    by another path: directly, the configuration one alone, or from inside a model's own import)."""
    cases, expected = saved
    done = subprocess.run(
        [sys.executable, "-c", RELOAD.format(then=then), json.dumps(cases)],
        capture_output=True, text=True, cwd=ROOT, timeout=hang_limit(30),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    reloaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(reloaded) == set(expected)
    for name, (cls, values) in expected.items():
        assert reloaded[name][0] == cls, name
        torch.testing.assert_close(torch.tensor(reloaded[name][1]), torch.tensor(values), rtol=0, atol=0)


def test_the_registration_also_happens_when_transformers_was_imported_first(saved):
    """transformers' AutoConfig already loaded when the package is imported: registered at once."""
    cases, expected = saved
    body = (
        "import json, sys\nimport transformers\nfrom transformers import AutoConfig, AutoModel\nimport constrained_sft\n"
        "cases = json.loads(sys.argv[1])\n"
        "print(json.dumps({n: type(getattr(transformers, a).from_pretrained(f)).__name__ for n, (a, f, _) in "
        "cases.items()}))"
    )
    done = subprocess.run([sys.executable, "-c", body, json.dumps(cases)], capture_output=True, text=True, cwd=ROOT,
                          timeout=hang_limit(30))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {n: cls for n, (cls, _) in expected.items()}
