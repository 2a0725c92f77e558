"""The step-time benchmark runs end to end on the tiny model (its GPU commands must work the first time a GPU is
lent): fresh timing processes with every setting on one model, memory per setting, ratios with intervals."""

import json
import os
import subprocess
import sys

import pytest
from conftest import hang_limit

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "step_time.py")


def _run(tmp_path, *flags):
    out = tmp_path / "result.json"
    cmd = [
        sys.executable,
        SCRIPT,
        "--model",
        "tiny",
        "--seq",
        "32",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--out",
        str(out),
    ]
    result = subprocess.run(
        [*cmd, *flags],
        capture_output=True,
        text=True,
        timeout=hang_limit(30),
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


def test_step_time_rows_ratios_and_memory(tmp_path):
    result = _run(tmp_path, "--settings", "sft,auto", "--repeats", "2")
    rows = {r["setting"]: r for r in result["rows"]}
    assert set(rows) == {"sft", "auto"} and result["repeats"] == 2
    assert rows["sft"]["time_ratio"] == 1.0 and len(rows["auto"]["process_ratios"]) == 2
    low, high = rows["auto"]["time_ratio_ci95"]
    assert low <= sum(rows["auto"]["process_ratios"]) / 2 <= high
    assert rows["auto"]["flop_ratio_estimate"] > 1.0 and rows["auto"]["tflops"] > 0
    assert rows["sft"]["peak_mib"] > 0 and rows["auto"]["memory_ratio"] == pytest.approx(
        rows["auto"]["peak_mib"] / rows["sft"]["peak_mib"]
    )
    root = os.path.dirname(os.path.dirname(SCRIPT))
    head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # the results name the commit they measured (a source checkout in git)
        assert head.stdout.startswith(rows["auto"]["commit"].removesuffix("+dirty"))


@pytest.mark.slow
def test_step_time_with_lora_and_a_baseline_checkout(tmp_path):
    """`--baseline-code` alternates processes with another checkout (here this one again: rows labelled @base)."""
    root = os.path.dirname(os.path.dirname(SCRIPT))
    result = _run(
        tmp_path, "--settings", "sft,all", "--lora", "--no-memory", "--repeats", "1", "--baseline-code", root
    )
    assert [r["setting"] for r in result["rows"]] == ["sft", "all"]  # the same checkout twice: one code version
    assert result["model"] == "tiny + LoRA" and result["rows"][1]["peak_mib"] is None


def test_flop_estimate_counts_only_the_positions_the_trainer_reads():
    """The budgeted k may exceed a sequence's T - 1 next-token positions; the trainer then reads the layers whole
    (T positions), and the estimate must count those, not k (the tiny model at 4 x 256 budgets k = 861); 'all'
    reads the T - 1 supervised ones."""
    import argparse
    import importlib.util

    from constrained_sft.testing import tiny_causal_lm

    spec = importlib.util.spec_from_file_location("step_flops", os.path.join(os.path.dirname(SCRIPT), "step_flops.py"))
    step_flops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(step_flops)
    config = tiny_causal_lm("llama", num_layers=4, hidden=32, vocab=32).config
    args = argparse.Namespace(batch=4, seq=256, lora=False, device="cpu")
    every = step_flops.flop_estimate(config, args, "auto")
    assert every == step_flops.flop_estimate(config, args, "1000") == step_flops.flop_estimate(config, args, "255")
    supervised = step_flops.flop_estimate(config, args, "all")
    assert (every[0] - 1) / (supervised[0] - 1) == pytest.approx(256 / 255)
    assert 1.0 < step_flops.flop_estimate(config, args, "8")[1] < every[1]


def test_readout_overhead_compares_the_library_path_with_a_fused_reference_that_agrees(tmp_path):
    """The fusion benchmark's hand-fused reference (one autograd node) computes the library's gradients, so its
    time difference is overhead alone; both paths are timed and the result names the shape."""
    import importlib.util

    path = os.path.join(os.path.dirname(SCRIPT), "readout_overhead.py")
    spec = importlib.util.spec_from_file_location("readout_overhead", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "overhead.json"
    result = module.main(["--seq", "24", "--rows", "5", "--calls", "2", "--repeats", "1", "--out", str(out)])
    assert result["max_gradient_difference"] < 1e-5 and result["rows_per_layer"] == 4 * 5
    assert set(result["us_per_call"]) == {"library", "fused reference"}
    assert all(row["median"] > 0 for row in result["us_per_call"].values())
    assert json.loads(out.read_text())["shape"]["layers"] == 3


def test_results_name_a_commit_only_for_a_package_the_repository_tracks(tmp_path, monkeypatch):
    """A source copy inside another repository (untracked there) has no commit of its own: the results name the
    version alone; once that repository tracks it, its commit."""
    import importlib.util

    monkeypatch.syspath_prepend(os.path.dirname(SCRIPT))  # step_time imports its siblings, as when run as a script
    spec = importlib.util.spec_from_file_location("step_time", SCRIPT)
    step_time = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(step_time)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "notes.txt").write_text("the outer repository\n")
    subprocess.run([*git, "add", "notes.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "outer"], check=True)
    package = tmp_path / "copy" / "constrained_sft"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    assert step_time.source_commit(str(package)) is None
    subprocess.run([*git, "add", "copy"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "track the copy"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert step_time.source_commit(str(package)) == head


def test_dual_optimizer_benchmark_end_to_end_and_its_measures(tmp_path):
    """Two seeds of 12 steps per method run and summarise; the settling step, overshoot and total variation are what
    their definitions say on known trajectories."""
    import numpy as np

    script = os.path.join(os.path.dirname(SCRIPT), "dual_optimizers.py")
    sys.path.insert(0, os.path.dirname(script))
    from dual_optimizers import first_settled, run_metrics

    slack = np.array([[1.0], [1.5], [-1.0], [-1.0], [-1.0]])
    assert first_settled(slack, np.zeros_like(slack), window=1) == 3
    assert (
        first_settled(slack, np.zeros_like(slack), window=2) == 4
    )  # the trailing mean of steps 3-4 is the first <= 0
    assert first_settled(np.ones((3, 1)), np.zeros((3, 1)), window=1) is None
    metrics = run_metrics({"dual": [[0.0], [2.0], [1.0], [1.5]], "slack": slack[:4].tolist(), "f_L": 1.0,
                           "accuracy": 0.5}, resilience=0.0, window=1)  # fmt: skip
    assert metrics["overshoot"] == 0.5 and metrics["total_variation"] == 3.5
    out = tmp_path / "dual.json"
    cmd = [sys.executable, script, "--seeds", "2", "--steps", "12", "--output", str(out)]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=hang_limit(100), env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["method"] for r in rows] == ["sgd", "adam", "nupi", "augmented_lagrangian"]
    assert "| nupi |" in result.stdout and "accuracy_minus_sgd" in rows[2] and "accuracy_minus_sgd" not in rows[0]
    ruled = tmp_path / "rule.json"  # the dual-lr rule: C / mean |slack| at step 1 of the seed's ERM run
    cmd = [sys.executable, script, "--seeds", "2", "--steps", "12", "--methods", "sgd", "--dual_lr_rule", "0.1",
           "--against", str(out), "--output", str(ruled)]  # fmt: skip
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=hang_limit(100), env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = json.loads(ruled.read_text())["runs"]
    for erm, sgd in zip(runs["erm"], runs["sgd"], strict=True):
        assert sgd["dual_lr"] == pytest.approx(0.1 / erm["initial_slack"]) and erm["initial_slack"] > 0
        assert sgd["initial_slack"] == pytest.approx(erm["initial_slack"])  # the same first step as the ERM run
    assert "accuracy_minus_against" in json.loads(ruled.read_text())["rows"][0]


@pytest.mark.slow
def test_dual_optimizer_study_summary_on_a_tiny_study(tmp_path):
    """A tiny study with the four dual-optimizer arms and ERM (1 seed, 3 steps, logged every step) summarises: one
    row per optimizer with its settling measures and paired intervals against ERM (and against SGD for the others)."""
    from constrained_sft.cli import main as cli
    from constrained_sft.testing import tiny_causal_lm, tiny_tokenizer

    tiny_causal_lm("llama", seed=1).save_pretrained(tmp_path / "model")
    tiny_tokenizer().save_pretrained(tmp_path / "model")
    rows = [{"prompt": f"s{i % 24} =", "completion": f" s{(i + 1) % 24}"} for i in range(48)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = (
        f"model_name_or_path: {tmp_path / 'model'}\ndataset_name: {tmp_path / 'rows.jsonl'}\neval_size: 8\n"
        "max_length: 16\nmax_steps: 3\nper_device_train_batch_size: 8\nlearning_rate: 1.0e-2\nuse_cpu: true\n"
        "bf16: false\nreport_to: none\nsave_strategy: 'no'\nresilience: 0.5\ndual_lr: 0.5\n"
    )
    recipes = {"constrained": "constraints: descent\n", "erm": "constraints: none\n"}
    recipes |= {name: f"constraints: descent\ndual_optimizer: {m}\n" for name, m in
                [("adam", "adam"), ("nupi", "nupi"), ("augmented-lagrangian", "augmented_lagrangian")]}  # fmt: skip
    for name, extra in recipes.items():
        (tmp_path / f"{name}.yaml").write_text(base + extra + f"output_dir: {tmp_path / name}\n")
    study = tmp_path / "study"
    arms = [
        a for name in ("adam", "nupi", "augmented-lagrangian") for a in ("--arm", f"{name}={tmp_path / name}.yaml")
    ]
    argv = ["study", "--config", str(tmp_path / "constrained.yaml"), "--erm_config", str(tmp_path / "erm.yaml"), *arms,
            "--reference", "constrained", "--study_dir", str(study), "--training_seeds", "1", "--logging_steps", "1",
            "--evaluate_before_training", "false", "--stage", "train"]  # fmt: skip
    assert cli(argv) == 0
    script = os.path.join(os.path.dirname(SCRIPT), "dual_optimizers_study.py")
    out = tmp_path / "dual.json"
    cmd = [sys.executable, script, "--study_dir", str(study), "--recipe", str(tmp_path / "constrained.yaml"),
           "--eval_size", "8", "--bootstrap_samples", "200", "--output", str(out)]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=hang_limit(60))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["method"] for r in rows] == ["sgd", "adam", "nupi", "augmented_lagrangian"]
    for row in rows:
        low, high = row["accuracy_minus_erm"][1:]
        assert low <= row["accuracy_minus_erm"][0] <= high and row["total_variation"] >= 0
    assert "accuracy_minus_sgd" in rows[1] and "accuracy_minus_sgd" not in rows[0]
    assert "| nupi |" in result.stdout


def test_padding_waste_counts_the_slots_the_device_computes_on():
    """benchmarks/padding_waste.py's summary from one pass's per-step counts: shares over the whole pass, means per
    step (two padded steps of 16 x 40 and 16 x 20 slots holding 500 and 300 real tokens)."""
    sys.path.insert(0, os.path.dirname(SCRIPT))
    from padding_waste import summary

    way = {"rows": 40, "documents": 32, "slots": [640, 320], "real": [500, 300], "supervised": [200, 100]}
    row = summary({**way, "steps": 2}, 16)
    assert row["padding_share"] == round(1 - 800 / 960, 4) and row["supervised_share_of_slots"] == round(300 / 960, 4)
    assert row["real_tokens_per_step"] == 400.0 and row["steps_per_pass"] == 2 and row["documents_seen"] == 32


@pytest.mark.slow
def test_padding_waste_end_to_end(tmp_path):
    """The real data path on a small pool: packed steps hold no padding, and both ways train on the same supervised
    tokens (packing changes the batches, not what is learned from)."""
    out = tmp_path / "waste.json"
    script = os.path.join(os.path.dirname(SCRIPT), "padding_waste.py")
    subprocess.run([sys.executable, script, "--rows", "200", "--out", str(out)], check=True, capture_output=True)
    report = json.loads(out.read_text())
    assert report["packed"]["padding_share"] == 0.0 < report["padded"]["padding_share"]
    assert report["packed"]["supervised_tokens_per_pass"] == report["padded"]["supervised_tokens_per_pass"]
    assert report["packed"]["steps_per_pass"] <= report["padded"]["steps_per_pass"]
