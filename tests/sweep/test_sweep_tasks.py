"""`constrained-sft sweep` beyond classifiers: an SFT recipe (token accuracy, maximised) and a video recipe (RMSE,
minimised), search and compare end to end on tiny models; the held-out rows never reach a trial."""

import json
import os

import optuna
import pytest

from constrained_sft.cli import main as cli
from constrained_sft.testing import tiny_causal_lm, tiny_tokenizer, tiny_videos

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPACE = """constrained:
  dual_lr: {low: 0.01, high: 1.0, log: true}
  descent_alpha: {low: 0.01, high: 0.2}
erm:
  learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true}
"""


def unique_rows(n: int) -> list[dict]:
    """Prompt / completion rows, each prompt different (three symbols: the base-24 digits of its index)."""
    return [
        {"prompt": f"s{i // 576} s{i // 24 % 24} s{i % 24} =", "completion": f" s{(i + 1) % 24}"} for i in range(n)
    ]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft-sweep")
    tiny_causal_lm("llama", seed=1).save_pretrained(root / "model")
    tiny_tokenizer().save_pretrained(root / "model")
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in unique_rows(60)))
    (root / "space.yaml").write_text(SPACE)
    return root


def test_sft_sweep_searches_on_a_carve_off_and_compares_with_intervals(lm, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["sweep", "--model_name_or_path", str(lm / "model"), "--dataset_name", str(lm / "rows.jsonl"),
            "--eval_size", "12", "--max_length", "32", "--output_dir", str(out), "--max_steps", "3",
            "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--use_cpu", "true", "--bf16", "false",
            "--gradient_checkpointing", "false", "--report_to", "none", "--noise_gamma", "0.5",
            "--space", str(lm / "space.yaml"), "--validation_size", "12", "--eval_batch_size", "16",
            "--n_trials", "2", "--baseline", "erm", "--final_seeds", "2", "--bootstrap_samples", "300",
            "--objective", "auc"]  # fmt: skip
    assert cli(argv) == 0
    sweep = tmp_path / "run-sweep"
    storage = f"sqlite:///{sweep / 'study.db'}"
    for arm in ("constrained", "erm"):
        study = optuna.load_study(study_name=f"run-sweep-{arm}", storage=storage)
        assert study.direction.name == "MAXIMIZE" and study.user_attrs["objective"] == "auc"
        assert sum(t.state.name == "COMPLETE" for t in study.trials) == 2
        assert all(0 <= t.user_attrs["auc"] <= 2 and t.user_attrs["worker"] for t in study.trials)
    result = json.loads((sweep / "comparison.json").read_text())
    pair = result["comparison"]["constrained - erm"]
    assert set(pair) == {"accuracy@0", "accuracy@0.5", "accuracy@1", "accuracy@1.5", "accuracy@2", "id_accuracy",
                         "ood_accuracy", "auc", "change 0->2", "descent_share"}  # fmt: skip
    for row in pair.values():
        d = row["difference"]
        assert d["low"] <= d["estimate"] <= d["high"] and d["verdict"] in ("better", "same", "worse")
        assert len(row["seed_std"]) == 2
    test = json.loads((sweep / "test" / "results.json").read_text())
    assert test["settings"]["held_out_rows"] == 12 and test["arms"]["erm"] == ["erm/seed0", "erm/seed1"]
    assert (sweep / "test" / "report.html").exists() and "| constrained - erm | auc |" in (
        sweep / "report.md"
    ).read_text()
    assert "| constrained - erm | accuracy@0 |" in capsys.readouterr().out


def test_sft_sweep_with_another_arm_searches_its_own_section_and_compares_it(lm, tmp_path):
    """`--arm penalty=RECIPE`: the penalty method is searched in the space's `penalty` section, retrained and compared
    with the reference (the ERM twin) like the twins are with each other; the recipe overrides reach it."""
    (tmp_path / "penalty.yaml").write_text("constraints: penalty\npenalty_weight: 0.5\n")
    (tmp_path / "space.yaml").write_text(SPACE + "penalty:\n  penalty_weight: {low: 0.1, high: 1.0}\n")
    out = tmp_path / "run"
    argv = ["sweep", "--model_name_or_path", str(lm / "model"), "--dataset_name", str(lm / "rows.jsonl"),
            "--eval_size", "12", "--max_length", "32", "--output_dir", str(out), "--max_steps", "2",
            "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--use_cpu", "true", "--bf16", "false",
            "--gradient_checkpointing", "false", "--report_to", "none", "--noise_gamma", "0.5",
            "--space", str(tmp_path / "space.yaml"), "--validation_size", "12", "--eval_batch_size", "16",
            "--n_trials", "1", "--baseline", "erm", "--final_seeds", "2", "--bootstrap_samples", "200",
            "--arm", f"penalty={tmp_path / 'penalty.yaml'}", "--gammas", "0", "1"]  # fmt: skip
    assert cli(argv) == 0
    sweep = tmp_path / "run-sweep"
    study = optuna.load_study(study_name="run-sweep-penalty", storage=f"sqlite:///{sweep / 'study.db'}")
    assert [set(t.params) for t in study.trials] == [{"penalty_weight"}]
    result = json.loads((sweep / "comparison.json").read_text())
    assert set(result["comparison"]) == {"constrained - erm", "penalty - erm"}
    row = result["comparison"]["penalty - erm"]["accuracy@1"]
    assert row["difference"]["low"] <= row["difference"]["estimate"] <= row["difference"]["high"]
    trained = json.loads((sweep / "final" / "penalty" / "seed1" / "training_args.json").read_text())
    assert trained["constraints"] == "penalty" and trained["max_steps"] == 2 and trained["seed"] == 1
    with pytest.raises(ValueError, match="must be NAME=RECIPE.yaml with a new name"):  # a name the sweep has
        cli([*argv[:-5], "--arm", f"erm={tmp_path / 'penalty.yaml'}"])


def test_sft_sweep_rows_never_include_the_held_out_rows(lm):
    """The search trains on the training rows minus `validation_size` and validates on those; the recipe's held-out
    rows (the compare stage's test) are neither."""
    from constrained_sft.data import DataArguments, load_chat_train_validation, load_train_eval

    args = DataArguments(dataset_name=str(lm / "rows.jsonl"), eval_size=12)
    train, validation = load_chat_train_validation(args, 12)
    held_out = {r["prompt"] for r in load_train_eval(args)[1]}
    assert len(validation) == 12 and len(train) == 60 - 12 - 12
    assert not held_out & {r["prompt"] for r in train} and not held_out & {r["prompt"] for r in validation}
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in validation}


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return tiny_videos(tmp_path_factory.mktemp("video-sweep"))


def test_video_sweep_minimises_rmse_and_compares(videos, tmp_path):
    out = tmp_path / "dust"
    recipe = os.path.join(ROOT, "recipes", "dust", "skvideo", "constrained.yaml")
    argv = ["sweep", "--config", recipe, "--space", os.path.join(ROOT, "recipes", "dust", "skvideo", "sweep.yaml"),
            "--video_source", str(videos), "--video_test", "c", "--video_exclude", "d", "--frame_size", "32",
            "--clip_frames", "4", "--dictionary_atoms_per_side", "16", "--num_train_epochs", "2",
            "--per_device_train_batch_size", "16", "--output_dir", str(out), "--n_trials", "2", "--baseline", "erm",
            "--final_seeds", "2", "--validation_size", "2", "--eval_batch_size", "64", "--bootstrap_samples", "300",
            "--disable_tqdm", "true"]  # fmt: skip
    assert cli(argv) == 0
    sweep = tmp_path / "dust-sweep"
    study = optuna.load_study(study_name="dust-sweep-constrained", storage=f"sqlite:///{sweep / 'study.db'}")
    assert study.direction.name == "MINIMIZE" and {"dual_lr", "descent_alpha", "seed"} <= set(study.trials[0].params)
    result = json.loads((sweep / "comparison.json").read_text())
    rmse = result["comparison"]["constrained - erm"]["rmse@0.5"]
    d = rmse["difference"]
    assert d["estimate"] == pytest.approx(rmse["constrained"] - rmse["erm"])
    assert d["verdict"] == ("better" if d["high"] < 0 else "worse" if d["low"] > 0 else "same")  # lower is better
    test = json.loads((sweep / "test" / "results.json").read_text())
    assert "test videos ['c']" in test["settings"]["description"] and (sweep / "test" / "frames.png").exists()
    best = result["arms"]["constrained"]["best"]
    values = [t["value"] for t in result["arms"]["constrained"]["trials"] if t["state"] == "COMPLETE"]
    assert best["value"] == min(values)


def test_the_documented_arms_sweep_runs_with_the_shipped_space_and_recipes(lm, tmp_path, capsys):
    """The search guide's example: the SmolLM2 recipe and its shipped sweep space with `--arm penalty / early-exit /
    neftune` (the shipped recipes; the command line points them at a tiny model). Each extra arm falls back to the
    `constrained` or `erm` section and searches only the fields it reads (no `resilience` or `dual_lr` for the penalty
    method, which runs no dual ascent), then every arm is retrained and compared with the ERM twin."""
    recipes = os.path.join(ROOT, "recipes", "smollm2-135m", "sharegpt")
    out = tmp_path / "run"
    argv = ["sweep", "--config", os.path.join(recipes, "constrained.yaml"), "--space", os.path.join(recipes, "sweep.yaml"),
            "--baseline", "erm", *[a for n in ("penalty", "early-exit", "neftune")
                                   for a in ("--arm", f"{n}={os.path.join(recipes, n + '.yaml')}")],
            "--model_name_or_path", str(lm / "model"), "--dataset_name", str(lm / "rows.jsonl"),
            "--dataset_format", "prompt_completion", "--max_train_samples", "48", "--eval_size", "12",
            "--max_length", "32", "--constrained_layers", "all", "--output_dir", str(out), "--max_steps", "2",
            "--evaluate_before_training", "false", "--validation_size", "12", "--eval_batch_size", "16",
            "--n_trials", "1", "--final_seeds", "2", "--bootstrap_samples", "200", "--gammas", "0", "1"]  # fmt: skip
    assert cli(argv) == 0
    sweep = tmp_path / "run-sweep"
    storage = f"sqlite:///{sweep / 'study.db'}"
    params = {arm: set(optuna.load_study(study_name=f"run-sweep-{arm}", storage=storage).trials[0].params)
              for arm in ("constrained", "erm", "penalty", "early-exit", "neftune")}  # fmt: skip
    assert params == {
        "constrained": {"dual_lr", "descent_alpha", "resilience", "learning_rate", "seed"},
        "erm": {"learning_rate", "seed"},
        "penalty": {"descent_alpha", "learning_rate", "seed"},  # no dual ascent: dual_lr, resilience not searched
        "early-exit": {"learning_rate", "seed"},  # nor the descent step alpha
        "neftune": {"learning_rate", "seed"},  # the erm section
    }
    report = (sweep / "report.md").read_text()
    assert "Not searched (the arm does not read them): dual_lr, resilience." in report
    comparison = json.loads((sweep / "comparison.json").read_text())["comparison"]
    assert set(comparison) == {"constrained - erm", "penalty - erm", "early-exit - erm", "neftune - erm"}
    trained = json.loads((sweep / "final" / "neftune" / "seed1" / "training_args.json").read_text())
    assert trained["neftune_noise_alpha"] == 5.0 and trained["constraints"] == "none" and trained["max_steps"] == 2
    # each recipe parsed on its own: no key of an arm parsed before (penalty's weight, early exit's scale) leaks in
    assert (trained["penalty_weight"], trained["early_exit_scale"]) == (1.0, "uniform")
    assert "penalty: 1 trials" in capsys.readouterr().out
