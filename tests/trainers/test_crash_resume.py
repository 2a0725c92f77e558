"""
A constrained run SIGKILLed at chosen moments (between steps, inside a checkpoint save, during evaluation, while
writing the report) and restarted with `resume_from_checkpoint=True` each time finishes bit-exactly like the run
that was never interrupted: weights, multipliers, dual-optimizer moments and the feasibility history. The default
suite kills the SFT trainer at 4 points and runs the dual methods (about 35 s: each attempt is a process forked from a
server that imported the stack once); the slow-marked tests kill both trainers at every point, kill at random moments
from outside (fresh interpreters), and kill one of 2 processes; `benchmarks/crash_resume.py` repeats random kills.
"""

import json
import multiprocessing
import multiprocessing.forkserver
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import hang_limit, launch_on_cpu

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "crash_resume.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import crash_resume  # noqa: E402
from crash_resume import finished, largest_difference  # noqa: E402  (what the script's `dump` wrote, compared)

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}


# One process per attempt, forked by a server that imported the script and its stack once (multiprocessing's
# forkserver: a clean single-threaded process, unlike this pytest worker): ~5 s of imports saved per attempt.
FORKS = multiprocessing.get_context("forkserver")
FORKS.set_forkserver_preload(["crash_resume"])


def start_fork_server() -> None:
    """The fork server, started with the scripts folder on PYTHONPATH: Python 3.11's server does not take this
    process's sys.path, and a preload it cannot import is skipped without a word (every child then imports it)."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(SCRIPT), saved]))
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved


def forked_attempt(argv: list[str], stderr_path) -> subprocess.CompletedProcess:
    """`python crash_resume.py ARGV` as a child of the fork server; its exit code (-9 when it killed itself)."""
    start_fork_server()
    child = FORKS.Process(target=crash_resume.forked, args=(argv, ENV, str(stderr_path)))
    child.start()
    child.join(hang_limit(60))
    if child.is_alive():
        child.kill()
        child.join()
        raise subprocess.TimeoutExpired([SCRIPT, *argv], hang_limit(60))
    return subprocess.CompletedProcess([SCRIPT, *argv], child.exitcode, "", Path(stderr_path).read_text())


def attempt(task, out, kill="none", processes=1, overrides="{}"):
    """One attempt; returns its exit code (-9 when it killed itself)."""
    if processes == 1:
        with tempfile.NamedTemporaryFile(suffix=".stderr") as log:
            result = forked_attempt([task, str(out), kill, overrides], log.name)
    else:
        result = launch_on_cpu(processes, SCRIPT, task, str(out), kill)
    if kill == "none":
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def resume_chain(task, out, kills, processes=1, overrides="{}"):
    """Run with each kill in turn, restarting with resume_from_checkpoint=True, then to the end; the stderr of each
    attempt after the first."""
    logs = []
    for kill in kills:
        result = attempt(task, out, kill, processes, overrides)
        assert result.returncode != 0, f"{kill}: the run was not killed"
        logs.append(result.stderr)
    logs.append(attempt(task, out, "none", processes, overrides).stderr)
    return logs[1:]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    cache = {}

    def get(task):
        if task not in cache:
            out = tmp_path_factory.mktemp(f"full-{task}")
            attempt(task, out)
            cache[task] = finished(out)
        return cache[task]

    return get


def test_killed_runs_resume_bit_exactly(tmp_path, reference):
    """Killed halfway through trainer_state.json of checkpoint-4, during the noisy evaluation at step 8, inside the
    atomic write of checkpoint-10's constraint state, and while writing constraints.json at the end."""
    logs = resume_chain("sft", tmp_path, ["save:4:state", "eval:8", "save:10:constraint", "report"])
    assert f"Skipped {tmp_path / 'checkpoint-4'} (incomplete" in logs[0]  # one line names the half-written folder
    assert f"resuming from {tmp_path / 'checkpoint-2'}" in logs[0]
    assert f"Skipped {tmp_path / 'checkpoint-10'} (incomplete" in logs[2]
    assert largest_difference(finished(tmp_path), reference("sft")) == 0.0
    assert json.loads((tmp_path / "constraints.json").read_text())["window_steps"] == [1, 12]
    assert not list(tmp_path.rglob("*.tmp"))  # atomic writes: every temporary was consumed by the next write
    assert all((tmp_path / f"checkpoint-{s}" / "checkpoint_complete.json").exists() for s in range(2, 13, 2))


def test_a_killed_streamed_run_resumes_bit_exactly(tmp_path, reference):
    """The same run on the rows as an IterableDataset (no length: the Trainer skips the batches a resumed run already
    consumed by reading them again), killed between steps 5 and 6 and inside checkpoint-8's constraint state."""
    logs = resume_chain("sft-streamed", tmp_path, ["step:5", "save:8:constraint"])
    assert f"Resuming from {tmp_path / 'checkpoint-4'} (optimizer step 4)" in logs[0]
    assert f"resuming from {tmp_path / 'checkpoint-6'}" in logs[1]  # checkpoint-8 was left incomplete
    assert largest_difference(finished(tmp_path), reference("sft-streamed")) == 0.0


def test_a_killed_vision_language_run_resumes_bit_exactly(tmp_path, reference):
    """A tiny Idefics3 trained on images with noise on text and image features (sigma_img measured on the first
    training batch by each attempt's starting model), killed between steps 3 and 4 and inside checkpoint-6's trainer
    state: the same weights, multipliers and history as the uninterrupted run."""
    logs = resume_chain("vlm", tmp_path, ["step:3", "save:6:state"])
    assert f"Resuming from {tmp_path / 'checkpoint-2'} (optimizer step 2)" in logs[0]
    assert f"resuming from {tmp_path / 'checkpoint-4'}" in logs[1]
    assert largest_difference(finished(tmp_path), reference("vlm")) == 0.0
    report = json.loads((tmp_path / "constraints.json").read_text())
    assert report["noise_image_sigma_x"] > 0


@pytest.mark.parametrize(
    "settings",
    [
        {"dual_optimizer": "nupi", "nupi_kp": 2.0, "nupi_ema": 0.5},
        {"dual_optimizer": "augmented_lagrangian", "alm_growth": 1.5},
    ],
    ids=["nupi", "augmented_lagrangian"],
)
def test_dual_methods_resume_bit_exactly_after_a_kill(tmp_path, settings):
    """nuPI's controller state and the augmented Lagrangian's penalty coefficients survive SIGKILL inside a
    checkpoint's constraint state and between steps: the run ends bit for bit like the uninterrupted one."""
    overrides = json.dumps(settings)
    attempt("sft", tmp_path / "full", overrides=overrides)
    resume_chain("sft", tmp_path / "cut", ["save:6:constraint", "step:9"], overrides=overrides)
    assert largest_difference(finished(tmp_path / "cut"), finished(tmp_path / "full")) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("task", ["sft", "classifier"])
def test_every_kill_point(tmp_path, reference, task):
    """Inside every stage of a save (the first one included: the restart then trains from step 0), between steps,
    in an evaluation, in the report."""
    kills = [f"save:{s}:{stage}" for s, stage in [(2, "model"), (4, "rng"), (6, "state"), (8, "marker")]]
    kills += ["step:9", "save:10:constraint", "step:11", "eval:12", "report"]
    resume_chain(task, tmp_path, kills)
    assert largest_difference(finished(tmp_path), reference(task)) == 0.0


@pytest.mark.slow
def test_random_external_kills(tmp_path, reference):
    """SIGKILL from outside at a random moment (seeded) of each attempt's training until the run finishes."""
    rng = random.Random(0)
    started = tmp_path.parent / f"{tmp_path.name}.started"
    kills = 0
    while True:
        started.unlink(missing_ok=True)
        cmd = [sys.executable, SCRIPT, "sft", str(tmp_path), "none"]
        env = {**ENV, "CRASH_STARTED": str(started)}
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        while not started.exists() and proc.poll() is None:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.5))  # training 12 steps, 6 saves and 3 noisy evaluations takes about 1 s
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        _, stderr = proc.communicate()
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, stderr[-3000:]
    assert kills >= 3
    assert largest_difference(finished(tmp_path), reference("sft")) == 0.0


@pytest.mark.slow
def test_two_processes_kill_one_rank_resume_both(tmp_path):
    full = tmp_path / "full"
    attempt("sft", full, processes=2)
    cut = tmp_path / "cut"
    resume_chain("sft", cut, ["rank1:save:4:rng", "rank1:step:7", "rank0:eval:8"], processes=2)
    for rank in (0, 1):
        assert largest_difference(finished(cut, f".rank{rank}"), finished(full, f".rank{rank}")) == 0.0
