"""
Several machines searching one study: two `constrained-sft sweep --stage search` workers on a real PostgreSQL server
(a throw-away cluster this fixture makes on a local port and tears down), one of them killed mid-trial. The study
must end with exactly `--n_trials` finished trials, each run by one worker, the killed trial failed (once its
heartbeat is stale) and replaced, never counted.

The server comes from Debian's `postgresql` package, the driver from PyPI (`psycopg`, the `postgres` extra).
Where either is missing the test is skipped saying so, unless CONSTRAINED_SFT_REQUIRE_POSTGRES=1 (set by `.ci/run`,
which installs the server), where it fails.
"""

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import optuna
import pytest
from conftest import free_port, hang_limit
from datasets import Dataset

from constrained_sft.testing import tiny_encoder, tiny_tokenizer

N_TRIALS = 6


def missing(reason: str):
    if os.environ.get("CONSTRAINED_SFT_REQUIRE_POSTGRES"):
        pytest.fail(f"CONSTRAINED_SFT_REQUIRE_POSTGRES is set but {reason}")
    pytest.skip(reason)


def as_server(*cmd: str, **kwargs) -> subprocess.CompletedProcess:
    """A server binary, run as the `postgres` user when we are root (`initdb` refuses to run as root)."""
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    return subprocess.run(
        [*prefix, *cmd], check=True, capture_output=True, text=True, timeout=hang_limit(12), **kwargs
    )


@pytest.fixture(scope="module")
def postgres():
    """The URL of a database on a fresh PostgreSQL cluster; the cluster is stopped and deleted afterwards."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb")]
    if not found[-1]:
        missing("no PostgreSQL server binaries (Debian: apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing('no PostgreSQL driver (pip install "psycopg[binary]", the `postgres` extra)')
    bindir = os.path.dirname(found[-1])
    root = tempfile.mkdtemp(prefix="csft-pg-")  # not under pytest's 0700 tmp tree: the postgres user must enter it
    os.chmod(root, 0o755)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data, port = os.path.join(root, "data"), free_port()
    try:
        as_server(os.path.join(bindir, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        as_server(
            os.path.join(bindir, "pg_ctl"), "-D", data, "-o", options, "-l", os.path.join(root, "log"), "-w", "start"
        )
        as_server(os.path.join(bindir, "createdb"), "-h", "127.0.0.1", "-p", port, "-U", "postgres", "sweeps")
        yield f"postgresql://postgres@127.0.0.1:{port}/sweeps"
    finally:
        if os.path.isdir(data):
            subprocess.run(["runuser", "-u", "postgres", "--"] * (os.geteuid() == 0)
                           + [os.path.join(bindir, "pg_ctl"), "-D", data, "-m", "immediate", "stop"],
                           capture_output=True, timeout=hang_limit(6))  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    root = tmp_path_factory.mktemp("pg-sweep")
    tiny_encoder("bert", layers=3).save_pretrained(root / "encoder")
    tiny_tokenizer().save_pretrained(root / "encoder")
    rows = [{"text": f"s{i % 24} s{(i * 7) % 24} s{(i * 5) % 24}" + (" s3" if i % 2 else " s5"), "label": i % 2}
            for i in range(96)]  # fmt: skip
    (root / "data").mkdir()
    Dataset.from_list(rows).to_csv(root / "data" / "train.csv")
    (root / "space.yaml").write_text(
        "constrained:\n  dual_lr: {low: 0.01, high: 1.0, log: true}\n  descent_alpha: {low: 0.01, high: 0.2}\n"
    )
    return root


def sweep_argv(recipe, storage, study_name="pg", steps=24) -> list[str]:
    return ["sweep", "--task", "classification",
           "--model_name_or_path", str(recipe / "encoder"), "--dataset_name", str(recipe / "data"),
           "--dataset_test_split", "none", "--max_seq_length", "16", "--output_dir", str(recipe / "out"),
           "--max_steps", str(steps), "--per_device_train_batch_size", "8", "--use_cpu", "true", "--report_to", "none",
           "--noise_gamma", "0.5", "--space", str(recipe / "space.yaml"), "--validation_size", "16",
           "--eval_batch_size", "16", "--stage", "search", "--n_trials", str(N_TRIALS), "--pruner", "none",
           "--storage", storage, "--study_name", study_name, "--heartbeat_interval", "2", "--disable_tqdm", "true"]  # fmt: skip


def worker(recipe, storage, log) -> subprocess.Popen:
    """A search worker whose trials train 96 steps (~2 s here): a look at the study under a busy suite takes about as
    long as a 24-step trial, which let worker A finish its trials unseen once; and the killed trial's heartbeat goes
    stale (4 s) while B still has trials to ask for, so B is the one that fails it."""
    cmd = [sys.executable, "-m", "constrained_sft", *sweep_argv(recipe, storage, steps=96)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, stdout=log, stderr=log, env=env, start_new_session=True)


def trials(storage, study_name="pg"):
    try:
        return optuna.load_study(study_name=f"{study_name}-constrained-head", storage=storage).get_trials(
            deepcopy=False
        )
    except KeyError:  # the study is not created yet
        return []


def state(storage, number: int) -> str:
    return next(t.state.name for t in trials(storage) if t.number == number)


def test_two_workers_share_one_study_and_a_killed_worker_loses_nothing(postgres, recipe, tmp_path):
    start = time.time()
    with open(tmp_path / "a.log", "w") as log_a, open(tmp_path / "b.log", "w") as log_b:
        a = worker(recipe, postgres, log_a)
        time.sleep(1.0)  # both create the study's tables otherwise; the second would race the first
        b = worker(recipe, postgres, log_b)
        killed_name = f"{socket.gethostname()}:{a.pid}"
        try:
            deadline = time.time() + hang_limit(30)
            killed = None
            while time.time() < deadline and a.poll() is None:  # kill A inside a trial, once a trial has finished
                now = trials(postgres)
                running = [t for t in now if t.state.name == "RUNNING" and t.user_attrs.get("worker") == killed_name]
                if running and sum(t.state.name == "COMPLETE" for t in now) >= 1:
                    # stopped first, then seen still inside that trial: a trial A ends between the look and the
                    # kill would be no killed trial at all (it happened once the trials got faster)
                    os.killpg(a.pid, signal.SIGSTOP)
                    if state(postgres, running[0].number) == "RUNNING":
                        killed = running[0].number
                        os.killpg(a.pid, signal.SIGKILL)
                        break
                    os.killpg(a.pid, signal.SIGCONT)
                time.sleep(0.2)
            assert killed is not None, (tmp_path / "a.log").read_text()[-3000:]
            assert b.wait(timeout=hang_limit(30)) == 0, (tmp_path / "b.log").read_text()[-3000:]
        finally:
            for proc in (a, b):
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
    wall = time.time() - start
    final = trials(postgres)
    done = [t for t in final if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(done) == N_TRIALS, [(t.number, t.state.name, t.user_attrs) for t in final]
    assert {t.number: t.state.name for t in final}[killed] == "FAIL"  # stale heartbeat: failed, not counted
    by_worker = {}
    for t in done:
        by_worker.setdefault(t.user_attrs["worker"], []).append(t.number)
    assert set(by_worker) <= {killed_name, f"{socket.gethostname()}:{b.pid}"}
    assert sum(len(v) for v in by_worker.values()) == len({t.number for t in done}) == N_TRIALS  # none ran twice
    points = {tuple(sorted(t.params.items())) for t in done}
    assert len(points) == N_TRIALS, [t.params for t in done]  # the workers searched apart (`sweep.sampler`)
    surplus = [t.number for t in final if t.user_attrs.get("surplus")]
    assert all({t.number: t.state.name for t in final}[n] == "FAIL" for n in surplus)
    print(f"\ntrials per worker: { {w: sorted(n) for w, n in by_worker.items()} }; killed trial {killed}; surplus "
          f"{surplus}; wall {wall:.0f} s")  # fmt: skip


def test_search_workers_submitted_to_slurm_fill_one_study(postgres, recipe, tmp_path, slurm, monkeypatch):
    """`sweep --launcher slurm --workers 2`: two Slurm jobs search the one study to exactly `--n_trials`; the URL's
    password reaches no file of the sweep folder (the jobs read it from their environment); the same command
    again submits nothing (the search holds its trials)."""
    from constrained_sft.cli import main as cli
    from constrained_sft.sweep.cluster import STORAGE_ENV

    monkeypatch.delenv(STORAGE_ENV, raising=False)  # the command sets it for its jobs; restored after the test
    secret = "sk-PG-SENTINEL-77"
    storage = postgres.replace("postgres@", f"postgres:{secret}@")  # trust authentication: any password passes
    argv = [*sweep_argv(recipe, storage, "pg-slurm"), "--sweep_dir", str(tmp_path / "sweep"),
            "--launcher", "slurm", "--workers", "2", "--slurm_cpus", "1"]  # fmt: skip
    assert cli(argv) == 0
    final = trials(postgres, "pg-slurm")
    done = [t for t in final if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(done) == N_TRIALS
    assert len({tuple(sorted(t.params.items())) for t in done}) == N_TRIALS  # two workers, no point trained twice
    assert len({t.user_attrs["worker"] for t in final}) <= 2
    ledger = json.loads((tmp_path / "sweep" / "slurm" / "jobs.json").read_text())["jobs"]
    assert [e["name"] for e in ledger] == ["worker-0", "worker-1"]
    assert not [p for p in (tmp_path / "sweep").rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert cli(argv) == 0  # the search holds its trials: no worker submitted
    assert len(json.loads((tmp_path / "sweep" / "slurm" / "jobs.json").read_text())["jobs"]) == 2
