"""`constrained-sft sweep` on a tiny encoder: trials on a validation split only, resume after SIGKILL, the
comparison with intervals, and refused settings."""

import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from conftest import hang_limit
from datasets import Dataset, DatasetDict

from constrained_sft.testing import tiny_encoder, tiny_tokenizer

SPACE = """constrained:
  dual_lr: {low: 0.01, high: 1.0, log: true}
  descent_alpha: {low: 0.01, high: 0.2}
erm:
  learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true}
"""


def rows(n, offset):
    """Label 1 iff the text ends in s3; texts are unique per index, so train and test never share one."""
    return [
        {"text": " ".join(f"s{(i * 7 + j) % 24}" for j in range(5)) + f" s{i % 7 + 10}" + (" s3" if i % 2 else " s5"),
         "label": ["neg", "pos"][i % 2]}
        for i in range(offset, offset + n)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    tiny_encoder("bert", layers=3).save_pretrained(root / "encoder")  # its head is dropped by the linear readout
    tiny_tokenizer().save_pretrained(root / "encoder")
    (root / "data").mkdir()
    Dataset.from_list(rows(64, 0)).to_csv(root / "data" / "train.csv")
    Dataset.from_list(rows(24, 1000)).to_csv(root / "data" / "test.csv")
    (root / "space.yaml").write_text(SPACE)
    return root


def argv(root, out, *extra):
    return [
        "sweep", "--task", "classification", "--model_name_or_path", str(root / "encoder"),
        "--dataset_name", str(root / "data"), "--max_seq_length", "16", "--output_dir", str(out),
        "--max_steps", "4", "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--use_cpu", "true",
        "--report_to", "none", "--noise_gamma", "0.5", "--space", str(root / "space.yaml"), "--validation_size", "16",
        "--eval_batch_size", "16", "--logging_steps", "2", *extra,
    ]  # fmt: skip


def complete_trials(db) -> int:
    """COMPLETE trials in the SQLite file, read-only: opening it through Optuna could race the sweep's own schema
    creation on a fresh file (both insert alembic's version row)."""
    import sqlite3

    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            return con.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
    except sqlite3.OperationalError:  # tables not created yet, or a write in progress
        return 0


def finished(storage, name):
    study = optuna.load_study(study_name=name, storage=storage)
    return [t for t in study.get_trials() if t.state.name in ("COMPLETE", "PRUNED")]


def test_search_never_reads_the_test_split_then_compare_gives_intervals(assets, tmp_path, monkeypatch):
    from constrained_sft.cli import main as cli
    from constrained_sft.data import classification

    real = classification.load_source
    seen = []

    class Guarded(DatasetDict):
        def __getitem__(self, split):
            seen.append(split)
            if split == "test":
                raise AssertionError("the sweep read the test split")
            return super().__getitem__(split)

    monkeypatch.setattr(classification, "load_source", lambda args: Guarded(real(args)))
    out = tmp_path / "run"
    common = argv(
        assets, out, "--n_trials", "2", "--baseline", "erm", "--final_seeds", "2", "--bootstrap_samples", "200"
    )
    assert cli([*common, "--stage", "search"]) == 0
    assert seen and "test" not in seen
    sweep = tmp_path / "run-sweep"
    study = optuna.load_study(study_name="run-sweep-constrained-head", storage=f"sqlite:///{sweep / 'study.db'}")
    trial = study.trials[0]
    assert {"dual_lr", "descent_alpha"} == set(trial.params) and trial.user_attrs["auc"] >= 0
    assert (
        "learning_rate" in optuna.load_study(study_name="run-sweep-erm-head", storage=study._storage).trials[0].params
    )
    assert (sweep / "trials-constrained-head.csv").exists() and (sweep / "history-constrained-head.png").exists()

    monkeypatch.setattr(classification, "load_source", real)
    assert cli([*common, "--stage", "compare"]) == 0  # the studies are complete: retrain, test, compare
    import json

    result = json.loads((sweep / "comparison.json").read_text())
    pair = result["comparison"]["constrained-head - erm-head"]
    auc = pair["auc"]["difference"]
    assert auc["low"] <= auc["estimate"] <= auc["high"] and auc["verdict"] in ("better", "same", "worse")
    assert set(pair) >= {"id_accuracy", "ood_accuracy", "auc", "accuracy@0", "accuracy@2", "descent_share"}
    test = json.loads((sweep / "test" / "results.json").read_text())
    assert test["settings"]["held_out_rows"] == 24 and len(test["models"]) == 4  # 2 arms x 2 seeds, on test.csv
    assert all(len(level["count"]) == 24 for level in test["models"]["erm-head/seed1"]["scores"].values())
    report = (sweep / "report.md").read_text()
    assert "## Held-out data" in report and "| constrained-head - erm-head | auc |" in report

    # run again: the saved models and the test evaluation are reused, nothing is trained or evaluated twice
    from constrained_sft.sweep import compare
    from constrained_sft.trainers import ConstrainedTrainer

    def refuse(*args, **kwargs):
        raise AssertionError("the comparison trained or evaluated again")

    monkeypatch.setattr(compare, "robustness", refuse)
    monkeypatch.setattr(ConstrainedTrainer, "train", refuse)
    assert cli([*common, "--stage", "compare"]) == 0
    assert json.loads((sweep / "comparison.json").read_text())["comparison"] == result["comparison"]


def test_three_trials_resume_after_sigkill(assets, tmp_path):
    out = tmp_path / "killed"
    db = tmp_path / "killed-sweep" / "study.db"
    storage = f"sqlite:///{db}"
    cmd = [sys.executable, "-m", "constrained_sft", *argv(assets, out, "--n_trials", "3", "--stage", "search")]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    with open(tmp_path / "killed.log", "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
        try:
            deadline = time.time() + hang_limit(24)
            while time.time() < deadline and proc.poll() is None and complete_trials(db) < 1:
                time.sleep(0.2)
            assert proc.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    first = finished(storage, "killed-sweep-constrained-head")
    assert 1 <= len(first) < 3
    subprocess.run(
        cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=hang_limit(30)
    )
    after = finished(storage, "killed-sweep-constrained-head")
    assert len(after) == 3
    kept = {t.number: (t.params, t.value) for t in after}
    assert all(kept[t.number] == (t.params, t.value) for t in first)  # finished trials survive the kill unchanged


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--objective", "accuracy"], r"--objective: invalid choice: 'accuracy' \(choose from 'auc', 'ood', 'id_with"),
        (["--readouts", "pooler"], r"`readouts` must be among \['head', 'linear'\]"),
        (
            ["--classifier_readout", "pooler"],
            r"--classifier_readout/--classifier-readout: invalid choice: 'pooler' \(choose from 'head', 'linear'\)",
        ),
        (["--n_trials", "0"], r"`n_trials` must be >= 1"),
        (["--validation_size", "0"], r"`validation_size` must be a fraction"),
        (["--gammas", "0.5"], r"`gammas` must be >= 2 levels"),
        (["--stage", "compare"], r"pass `--baseline erm`"),
        (["--constraints", "none", "--stage", "search"], r"sweep the constrained recipe"),
        (["--task", "regression"], r"`task` must be 'sft', 'classification' or 'video', got 'regression'"),
        (["--heartbeat_interval", "0"], r"`heartbeat_interval` must be >= 1"),
        (
            ["--stage", "search", "--space", "{out}/alpha.yaml"],
            r"search space `constrained.descent_alpha`: 1.5 is outside .*`descent_alpha`",
        ),
        (
            ["--stage", "search", "--space", "{out}/lr.yaml"],
            r"search space `erm.lr_scheduler_type`: 'bogus' is outside .*bogus",
        ),
        (
            ["--stage", "search", "--space", "{out}/broken.yaml"],
            r"`--space` .*broken.yaml:2:\d+: not valid YAML",
        ),
    ],
)
def test_refused_settings_name_the_field_and_write_nothing(assets, tmp_path, capsys, extra, match):
    """Choices are refused by the parser (exit 2, one usage line), bounds by `SweepArguments.validate`, a search
    space the recipe's config would refuse in a trial before the first trial."""
    import re

    from constrained_sft.cli import main as cli

    (tmp_path / "alpha.yaml").write_text(
        SPACE.replace("descent_alpha: {low: 0.01, high: 0.2}", "descent_alpha: {low: 0.1, high: 1.5}")
    )
    (tmp_path / "lr.yaml").write_text(SPACE + "  lr_scheduler_type: {choices: [linear, bogus]}\n")
    (tmp_path / "broken.yaml").write_text("constrained:\n\tdual_lr: {low: 0.1}\n")
    extra = [e.replace("{out}", str(tmp_path)) for e in extra]
    with pytest.raises((ValueError, SystemExit)) as refused:
        cli(argv(assets, tmp_path / "bad", *extra))
    message = str(refused.value) if issubclass(refused.type, ValueError) else capsys.readouterr().err
    assert re.search(match, message), message
    assert not (tmp_path / "bad-sweep").exists()


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # ask / tell by hand: no optimize loop beats for us
def test_a_trial_starts_only_within_n_trials_and_a_stale_one_frees_its_place(tmp_path):
    """`claim`: a trial waits while running trials before it hold the remaining places, runs once a stale one (its
    worker killed) is failed, and is dropped as surplus once the finished trials alone reach `n_trials`."""
    import threading

    from constrained_sft.sweep.search import claim, rdb_storage

    storage = rdb_storage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat=1)  # stale after 3 s without a heartbeat
    study = optuna.create_study(study_name="s", storage=storage)
    first = study.ask()
    study.tell(first, 1.0)
    killed = study.ask()
    storage.record_heartbeat(killed._trial_id)  # beat once, then its worker "dies"
    waiting = study.ask()
    started = time.time()
    assert claim(study, waiting, n_trials=2, poll=0.2) is True  # after the killed trial's place was freed
    assert time.time() - started >= 2.0 and study.trials[killed.number].state.name == "FAIL"
    study.tell(waiting, 2.0)
    late = study.ask()
    assert claim(study, late, n_trials=2, poll=0.2) is False  # two finished before it: surplus
    busy = study.ask()  # a place held by a live trial: wait, then stop when it finishes
    storage.record_heartbeat(busy._trial_id)
    third = study.ask()
    threading.Timer(1.0, lambda: study.tell(busy, 3.0)).start()
    assert claim(study, third, n_trials=3, poll=0.2) is False


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_trial_killed_before_its_first_heartbeat_is_failed_not_waited_on(tmp_path):
    """A worker killed between Optuna's `ask` (the trial is created RUNNING) and its heartbeat thread's first beat
    leaves a trial Optuna never fails. CI once hung on one after a SIGKILL: `search` waited for it forever. Now a trial
    seen untagged for the grace period is failed; one its worker tagged (`announce`, after a first beat) is left to
    the heartbeat."""
    import threading

    from constrained_sft.sweep.search import Unstarted, announce, rdb_storage, search

    storage = rdb_storage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat=1)  # grace: 3 s
    study = optuna.create_study(study_name="s", storage=storage)
    study.tell(study.ask(), 1.0)
    orphan = study.ask()  # its worker "killed" before any beat or tag
    live = study.ask()
    announce(live, "elsewhere:1")
    clock = [100.0]
    unstarted = Unstarted(clock=lambda: clock[0])
    for now in (100.0, 102.9):
        clock[0] = now
        unstarted.fail(study, study.get_trials(), storage)
        assert [t.state.name for t in study.get_trials()] == ["COMPLETE", "RUNNING", "RUNNING"]
    clock[0] = 103.0
    unstarted.fail(study, study.get_trials(), storage)
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE", "FAIL", "RUNNING"]
    assert "worker" not in study.trials[orphan.number].user_attrs

    study.tell(live, 2.0)
    orphan = study.ask()  # again, and now the whole loop: 3 finished trials need its place
    finished = threading.Event()
    threading.Thread(
        target=lambda: (search(study, 4, lambda t: 0.5, "t", poll=0.2), finished.set()), daemon=True
    ).start()
    assert finished.wait(60), "search waited on a trial that never started"
    states = [t.state.name for t in study.get_trials()]
    assert states[orphan.number] == "FAIL" and states.count("COMPLETE") == 4, states
    assert all("worker" in t.user_attrs for t in study.get_trials()[orphan.number + 1 :])
