"""
Every code example in the README and the guides is either run here or marked as not run, with a reason this test
prints. A fenced `python` / `bash` block is preceded by a marker comment:

    <!-- example: run -->                  run as written (after the substitutions below)
    <!-- example: run with=<prelude> -->   run after a prelude that defines the names the text leaves to the reader
    <!-- example: not run: <reason> -->    not run here (GPU, the Hub, a long job): the reason is printed

Substitutions are the test's, never the text's: a Hub id becomes a tiny local model, a Hub dataset a tiny local one,
and trainer configs get CPU settings and a 2-step budget (`SUBSTITUTIONS`). Python examples run in a fresh process
in a temporary folder. A block without a marker, or with an unknown one, fails.
"""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "docs" / "index.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]
BLOCK = re.compile(  # a fence, indented or not (inside a list item), with the marker on the line before it
    r"^(?:[ ]*<!-- example: (?P<marker>[^\n]*?) -->\n)?[ ]*```(?P<lang>python|bash|sh)\n(?P<code>.*?)^[ ]*```",
    re.S | re.M,
)

CPU = 'bf16=False, use_cpu=True, report_to="none", max_steps=2, disable_tqdm=True, '
SUBSTITUTIONS = {
    '"HuggingFaceTB/SmolLM2-135M-Instruct"': "TINY_LM",
    'load_dataset("trl-lib/Capybara", split="train")': "successor_dataset(16)",
    "ConstrainedSFTConfig(": f"ConstrainedSFTConfig({CPU}",
    "ConstrainedConfig(": 'ConstrainedConfig(report_to="none", max_steps=2, disable_tqdm=True, ',
}
PRELUDES = {
    # the tiny causal LM saved to a folder, standing in for a Hub id, and the dataset helper
    "": """
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer
TINY_LM = "tiny-lm"
tiny_causal_lm("llama").save_pretrained(TINY_LM)
tiny_tokenizer().save_pretrained(TINY_LM)
""",
    # a sequence classifier with its tokenizer and tokenized train / test rows
    "classifier": """
from constrained_sft.testing import presence_dataset, tiny_encoder, tiny_tokenizer
classifier, tokenizer = tiny_encoder("bert"), tiny_tokenizer()
train, test = presence_dataset(32), presence_dataset(8, seed=1)
""",
    # rows {"x": [3 floats], "labels": float} for the regression example
    "regression": """
import torch
from datasets import Dataset
g = torch.Generator().manual_seed(0)
x = torch.randn(32, 3, generator=g)
data = Dataset.from_list([{"x": r.tolist(), "labels": float(r.sum())} for r in x])
""",
    # a causal LM and a tokenized prompt for generation
    "generation": """
from constrained_sft.testing import tiny_causal_lm, tiny_tokenizer
model, tokenizer = tiny_causal_lm("llama"), tiny_tokenizer()
inputs = tokenizer("1 2 =", return_tensors="pt")
inputs.pop("token_type_ids", None)
""",
}


def examples() -> list:
    out = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            line = text[: match.start("code")].count("\n")
            out.append(pytest.param(match, id=f"{page.relative_to(ROOT)}:{line}"))
    return out


def test_the_pages_have_examples():
    assert len(examples()) >= 10


@pytest.mark.parametrize("block", examples())
def test_example(block, tmp_path, capsys):
    marker, lang, code = block["marker"], block["lang"], textwrap.dedent(block["code"])
    assert marker, "a code example without `<!-- example: run -->` or `<!-- example: not run: <reason> -->` before it"
    if marker.startswith("not run:"):
        reason = marker.removeprefix("not run:").strip()
        assert reason, "`not run` needs a reason"
        with capsys.disabled():
            print(f"\n  not run ({lang}): {reason}")
        return
    kind, _, prelude = marker.partition(" with=")
    assert kind == "run" and prelude in PRELUDES, f"unknown marker {marker!r}"
    assert lang == "python", "shell examples are run by their own tests (or marked `not run`), not here"
    for text, replacement in SUBSTITUTIONS.items():
        code = code.replace(text, replacement)
    script = PRELUDES[""] + PRELUDES[prelude] + code
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 0, f"{script}\n--- stderr ---\n{result.stderr[-3000:]}"
