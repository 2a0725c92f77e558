"""benchmarks/gpu_study.sh: `--smoke` runs the whole script (the five shipped recipes, two jobs, a time budget, weights
deleted once recorded) on a tiny model on CPU, on data with answerless first exchanges, and leaves the study's
results, small, in OUT_DIR, also when a SIGTERM stops it; on a GPU the real script's first minutes are checked by a
gpu-marked test."""

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from conftest import hang_limit

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("alpaca_eval")


def run_script(*args, env=None, timeout=None):
    environment = {**os.environ, "PY": sys.executable, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                   **(env or {})}  # fmt: skip
    return subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_study.sh"), *args], capture_output=True, text=True,
                          env=environment, timeout=timeout or hang_limit(100))  # fmt: skip


def test_the_smoke_run_goes_through_the_whole_script(tmp_path):
    out = tmp_path / "out"
    assets = str(tmp_path / "assets")
    result = run_script("--smoke", str(out), env={"BUDGET": "5", "SMOKE_ASSETS": assets})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    arms = ("constrained", "erm", "penalty", "early-exit", "neftune")
    back = sorted(p.name for p in out.iterdir())  # what a lent machine returns: at most 8 files, 16 MiB each
    assert len(back) <= 8 and all((out / n).is_file() and (out / n).stat().st_size < 16 * 2**20 for n in back), back
    assert {"study.tar.gz", "report.md", "results.json", "accuracy_vs_gamma.png", ".written-by.json"} <= set(back)
    assert json.loads((out / ".written-by.json").read_text())["device"]  # the versions and commit it ran on
    study = tmp_path / "unpacked"
    with tarfile.open(out / "study.tar.gz") as tar:
        tar.extractall(study)
    runs = {p.stem for p in (study / "runs").glob("*.json")}
    assert runs == {f"{arm}-seed{s}" for arm in arms for s in (0, 1)}
    assert (
        not list(study.rglob("*.safetensors"))
        and (study / "train" / "neftune" / "seed1" / "constraints.json").is_file()
    )
    summary = json.loads((study / "study.json").read_text())
    assert set(summary["robustness"]["comparisons"]) == {f"{arm} - erm" for arm in arms if arm != "erm"}
    assert set(summary["exits"]["models"]) == set(arms)  # each arm's seed 0 decoded self-speculatively
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["gammas"] == [0.0, 0.5, 1.5] and len(results["models"]) == 10
    assert "plan: 10 of 10 run(s) left" in result.stdout and "budget: 5.0 min" in result.stdout
    # 5 of the 80 training conversations have no answer in their first exchange: skipped, and said
    assert "train split: skipped 5 of 80 conversations: no answer in the first exchange." in result.stdout
    # the 75 training rows are tokenized once for the probe and the 10 runs (the datasets cache, shared)
    bars = re.findall(r"Tokenizing train dataset: +0%[^\r\n]*\| 0/(\d+)", result.stdout)
    assert bars.count("75") == 1, bars
    for record in (study / "runs").glob("*.json"):  # each phase measured beside what the plan estimated
        phases = json.loads(record.read_text())
        assert set(phases["seconds"]) == set(phases["estimates"]) >= {"train", "robustness", "answers"}, record
    work = tmp_path / "out.work" / "study" / "train"
    assert not list(work.glob("*/seed*/*.safetensors"))  # --keep_models none: weights gone once recorded

    # the results carried back continue elsewhere: untarred as the study folder, the same command has nothing to do
    again = run_script("--smoke", str(tmp_path / "again"), env={"BUDGET": "5", "STUDY_DIR": str(study),
                                                                 "SMOKE_ASSETS": assets})  # fmt: skip
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "plan: 0 of 10 run(s) left" in again.stdout and "finished " not in again.stdout
    assert (
        json.loads((study / "study.json").read_text())["robustness"]["comparisons"]
        == summary["robustness"]["comparisons"]
    )


def test_a_sigterm_packages_what_the_study_recorded(tmp_path):
    """SIGTERM (what `timeout` and a closing window send) once the first run's phase is recorded, and a second one
    while it stops the study and packages (this study on packed batches: `BATCHES=packed`): the script packages what the study recorded into study.tar.gz, whole, and
    exits 143, leaving no partial archive."""
    out, study = tmp_path / "out", tmp_path / "study"
    environment = {**os.environ, "PY": sys.executable, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                   "BUDGET": "5", "SMOKE_ASSETS": str(tmp_path / "assets"), "STUDY_DIR": str(study), "JOBS": "1",
                   "BATCHES": "packed", "ATTN": "sdpa"}  # fmt: skip
    script = subprocess.Popen(["bash", str(ROOT / "benchmarks" / "gpu_study.sh"), "--smoke", str(out)], env=environment,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + hang_limit(30)
    while not list(study.glob("runs/*.json")) and script.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert script.poll() is None, "the study ended before a record was written"
    script.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    script.send_signal(signal.SIGTERM)  # impatient: a second one while it packages
    stdout, stderr = script.communicate(timeout=hang_limit(12))
    assert script.returncode == 143, stderr[-3000:]
    assert "stopped by SIGTERM; packaging what the study recorded" in stderr
    with tarfile.open(out / "study.tar.gz") as tar:
        names = tar.getnames()
    recorded = {f"runs/{p.name}" for p in study.glob("runs/*.json")}
    assert recorded and recorded <= set(names), (recorded, names)
    partial = [p.name for p in out.iterdir() if p.name.startswith(".study.tar.gz")]  # a temporary left behind
    assert "run record(s)" in stdout and not partial


@pytest.mark.gpu
def test_the_gpu_study_starts_on_the_real_model(tmp_path):
    """On a GPU with the SmolLM2 cache: the real settings (bf16, 16 x 512, 300 held out) at 20 steps, one seed,
    within a 4-minute budget."""
    import torch

    from constrained_sft.data.assets import smollm2_path

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model = smollm2_path()
    env = {"STEPS": "20", "SEEDS": "1", "BUDGET": "4", "STUDY_DIR": str(tmp_path / "study")}
    result = run_script(model, str(tmp_path / "out"), env=env, timeout=590)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    study = json.loads((tmp_path / "out" / "study" / "study.json").read_text())
    assert study["settings"]["budget"]["held_out_sequences"] >= 300
