import contextlib
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from torch.utils.cpp_extension import get_default_build_root

# One torch (OpenMP / MKL) thread per process, for this process and every subprocess a test starts (issue 68): the
# models are tiny, so a second thread buys nothing, and several processes at once (pytest-xdist's workers, a 2-rank
# launch, a study's jobs, another program on the machine) each spinning on every core slowed a toy step 45x on a loaded
# 2-core machine. Set these variables yourself to test with more.
for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One folder for the C++ extensions the suite's processes build (DeepSpeed's CPU accelerator builds its shared-memory
# collectives on first use, ~30 s on one core), whatever HOME a test gives them (the doc examples run in a temporary
# one): built once per machine, not once per HOME
os.environ.setdefault("TORCH_EXTENSIONS_DIR", get_default_build_root())
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# every test that asks for a help sees it built from the parsers, never a text cached by an earlier run
# (tests/cli/test_imports.py turns the cache on, in a folder of its own)
os.environ["CONSTRAINED_SFT_HELP_CACHE"] = "0"
warnings.filterwarnings("ignore", category=FutureWarning)


# A time limit in a test is a hang detector, never a speed check (speed is benchmarks/' business): each is ten times
# what its step takes on 2 quiet cores, so a machine 5x slower (a loaded laptop, a shared CI runner) stays well inside
# it. CONSTRAINED_SFT_TEST_TIME_SCALE stretches every limit further (e.g. 3 on a machine kept busy by other work).
HANG_FACTOR = 10
TIME_SCALE_VARIABLE = "CONSTRAINED_SFT_TEST_TIME_SCALE"


TIME_SCALE_BOUNDS = (
    0.5,
    100.0,
)  # a limit below half its usual length fires on a quiet machine; past 100x, no hang ends


def time_scale() -> float:
    """CONSTRAINED_SFT_TEST_TIME_SCALE (default 1), a number within `TIME_SCALE_BOUNDS`; checked once when the session
    starts (`pytest_configure`), so a bad value stops the run with one line instead of failing inside a test."""
    text = os.environ.get(TIME_SCALE_VARIABLE, "").strip() or "1"
    try:
        scale = float(text)
    except ValueError:
        scale = float("nan")
    low, high = TIME_SCALE_BOUNDS
    if not low <= scale <= high:  # nan, inf, 1e-9, 5e-324 and 1e308 included
        raise pytest.UsageError(f"{TIME_SCALE_VARIABLE}={text!r}: give a number from {low:g} to {high:g} (e.g. 3), the "
                                "factor by which every test's hang limit is stretched")  # fmt: skip
    return scale


def pytest_configure(config) -> None:
    time_scale()  # a bad CONSTRAINED_SFT_TEST_TIME_SCALE: refused before any test runs


def hang_limit(usual: float) -> float:
    """The seconds a test lets a step run before calling it a hang: `HANG_FACTOR` x `usual` (what the step takes on 2
    quiet cores; at least a minute) x the time scale."""
    return max(usual * HANG_FACTOR, 60.0) * time_scale()


def hang_message(limit: float, what: str) -> str:
    """What a fired hang limit says: that it was the limit, and how long the step usually takes."""
    usual = limit / time_scale() / HANG_FACTOR
    return (
        f"{what} still ran after {limit:.4g} s, {HANG_FACTOR}x what it takes on 2 quiet cores (~{usual:.3g} s): a "
        f"hang, or a machine more than {HANG_FACTOR}x slower than that. On a slow or busy machine rerun with "
        f"{TIME_SCALE_VARIABLE}=3 (every limit x3)."
    )


def pytest_collection_modifyitems(session, config, items):
    """The doc examples first, the rest in their order: the examples' shell runs are one fixture that keeps two threads
    busy for minutes on one worker (tests/test_examples.py: `shell_runs`); started first they run beside the other
    tests, where met midway they were the suite's tail (pytest-xdist's work stealing moves tests, not a fixture's
    pool). Every worker sorts alike, so xdist's check that all collected the same order holds."""
    examples = Path(__file__).with_name("test_examples.py")
    items.sort(key=lambda item: item.path != examples)


def pytest_collection_finish(session):
    """Once the tests are collected (torch, transformers, TRL and the package imported: ~500k objects that live as long
    as the process), those objects are frozen out of the garbage collector's reach (`gc.freeze`, what the CPython docs
    advise for a process that forks or lives long): every later collection, automatic or the trainers' own
    `gc.collect()` at the end of a run (~1 s each over the whole heap on 2 cores), walks only what the tests made."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A `subprocess.TimeoutExpired` out of a test is reported as a fired hang limit (`hang_message`), with the
    command and the tail of its output, not as a bare traceback."""
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and call.excinfo.errisinstance(subprocess.TimeoutExpired):
        error = call.excinfo.value
        command = " ".join(map(str, error.cmd)) if isinstance(error.cmd, (list, tuple)) else str(error.cmd)
        tail = "".join(
            (x.decode(errors="replace") if isinstance(x, bytes) else x)[-3000:]
            for x in (error.stdout, error.stderr)
            if x
        )
        report.longrepr = f"{hang_message(error.timeout, f'`{command[:300]}`')}\n--- its output (tail) ---\n{tail}"


def free_port() -> str:
    """A TCP port nobody listens on, for `accelerate launch --main_process_port` (a fixed port can still be held
    by the previous launch's socket)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _native_stacks(processes) -> str:
    """Every process's Python and C++ stacks (`py-spy dump --native`, a dev dependency): where a thread waits on a
    lock or the GIL, which faulthandler's Python-only dump cannot show."""
    import shutil

    spy = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    if spy is None:
        return "py-spy not installed"
    dumps = []
    for process in processes:
        try:
            dump = subprocess.run(
                [spy, "dump", "--native", "--pid", str(process.pid)], capture_output=True, text=True, timeout=60
            )
            dumps.append(f"pid {process.pid}:\n{dump.stdout}{dump.stderr}")
        except (subprocess.TimeoutExpired, OSError) as error:
            dumps.append(f"pid {process.pid}: py-spy failed: {error}")
    return "\n".join(dumps)


def clear_stale_build_locks(root: str | os.PathLike | None = None, recheck_s: float = 1.0) -> list[Path]:
    """Removes the C++ extension build locks under `root` (the suite's TORCH_EXTENSIONS_DIR) that no process holds;
    returns them. Every process that loads a JIT extension (each rank of a DeepSpeed launch on CPU loads its
    shared-memory op) takes `<root>/<name>/lock` while ninja checks the build: torch's FileBaton creates it with
    O_EXCL, keeps it open and removes it after; a process killed in between (a hang limit's SIGABRT, a killed run, a
    machine restarted) leaves it, and every later load on the machine waits on it forever, with no message. A lock
    nobody has open, still the same file `recheck_s` later (not one released and taken again meanwhile), is such a
    leftover. Written here because torch has no stale-lock check (its `warn_after_seconds` is not passed by
    `cpp_extension`); processes of other users that psutil may not inspect are not seen."""
    import psutil

    def held(path: Path) -> bool:
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if any(Path(f.path) == path for f in process.open_files()):
                    return True
        return False

    def identity(path: Path):
        with contextlib.suppress(FileNotFoundError):
            stat = path.stat()
            return stat.st_ino, stat.st_mtime_ns
        return None

    candidates = {}
    for lock in Path(root or os.environ["TORCH_EXTENSIONS_DIR"]).glob("*/lock"):
        if (before := identity(lock)) is not None and not held(lock):
            candidates[lock] = before
    if not candidates:
        return []
    time.sleep(recheck_s)
    removed = []
    for lock, before in candidates.items():
        if identity(lock) == before and not held(lock):
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
                removed.append(lock)
                warnings.warn(f"removed {lock}: a C++ extension build lock no process held (left by a process "
                              "killed while building or loading the extension)", stacklevel=2)  # fmt: skip
    return removed


def launch_on_cpu(num_processes: int, *target: str, timeout: float | None = None, config_file: str | None = None):
    """`accelerate launch --multi_gpu` (or with `config_file`) of `target` (a script and its arguments, or
    `-m module ...`) as `num_processes` gloo CPU processes; a crash at any rank prints its Python stack
    (faulthandler). A launch still running after `timeout` seconds fails the test with every process's native and
    Python stacks (py-spy, then SIGABRT through faulthandler) and the tail of its output, so a hang in CI says where
    each rank was."""
    import signal

    if config_file is None:  # plain data parallel: gloo CPU processes
        how = ["--multi_gpu", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    else:  # an accelerate config (DeepSpeed: its CPU accelerator, over gloo); `use_cpu` must stay off for it
        how = ["--config_file", config_file]
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", *how, "--num_processes", str(num_processes),
        "--main_process_port", free_port(), *target,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    timeout = hang_limit(60) if timeout is None else timeout
    if config_file is None:
        env["ACCELERATE_USE_CPU"] = "true"
    else:  # a DeepSpeed config among them, whose ranks load its C++ op: never wait on a lock a killed process left
        clear_stale_build_locks()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # a hang: dump, then kill the ranks too (torch starts them in own sessions)
            import psutil

            children = psutil.Process(proc.pid).children(recursive=True)
            native = _native_stacks([*children, psutil.Process(proc.pid)])
            for child in [*children, psutil.Process(proc.pid)]:
                with contextlib.suppress(psutil.Error):
                    child.send_signal(signal.SIGABRT)
            try:
                stdout, stderr = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                for child in children:
                    with contextlib.suppress(psutil.Error):
                        child.kill()
                proc.kill()
                stdout, stderr = proc.communicate()
            pytest.fail(
                f"{hang_message(timeout, '`accelerate launch`')} The processes' stacks and output follow.\n"
                f"--- stdout (tail) ---\n{stdout[-4000:]}\n--- stderr (tail) ---\n{stderr[-12000:]}\n"
                f"--- native stacks (py-spy) ---\n{native[-12000:]}",
                pytrace=False,
            )
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def launch_failure(result: subprocess.CompletedProcess, tail: int = 3000) -> str:
    """What a failed launch printed, for the assertion: the lines a rank refused with (`constrained-sft: error:`;
    another rank's traceback, torch's report of the failed ranks, can push them out of the tail), then the tail."""
    refusals = [line for line in result.stderr.splitlines() if "constrained-sft: error:" in line]
    return "\n".join([*refusals, "--- stderr (tail) ---", result.stderr[-tail:]])


TRAIN_TINY = Path(__file__).with_name("scripts") / "train_tiny.py"


@pytest.fixture(scope="session")
def data_parallel_ranks(tmp_path_factory) -> list[dict]:
    """Each rank's record (tests/scripts/train_tiny.py) of the tiny model trained by 2 data-parallel gloo processes,
    2 rows per rank and step, 2 supervised tokens per row read per layer: what the DDP test holds against one process
    and the DeepSpeed tests hold against ZeRO, launched once per worker, not once per module (~40 s of CPU)."""
    import json

    out = tmp_path_factory.mktemp("data-parallel") / "ddp"
    settings = {"output_dir": str(out), "per_device_train_batch_size": 2, "layer_loss_tokens": 2}
    result = launch_on_cpu(2, str(TRAIN_TINY), str(out), json.dumps(settings))
    assert result.returncode == 0, launch_failure(result)
    return [json.loads((out.parent / f"ddp.rank{r}.json").read_text()) for r in range(2)]


def config_kwargs(output_dir, **overrides):
    """CPU-friendly defaults: fp32 (SFTConfig defaults to bf16, ~50x slower on CPU), no reporting, no saving."""
    base = dict(
        output_dir=str(output_dir),
        report_to="none",
        bf16=False,
        use_cpu=True,
        save_strategy="no",
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        learning_rate=3e-3,
        logging_steps=1,
        max_steps=6,
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    base.update(overrides)
    return base


@pytest.fixture
def make_trainer(tmp_path):
    from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
    from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

    def make(model=None, train_dataset=None, eval_dataset=None, trainer_cls=ConstrainedSFTTrainer, **overrides):
        output_dir = overrides.pop("output_dir", tmp_path / "out")
        args = ConstrainedSFTConfig(**config_kwargs(output_dir, **overrides))
        return trainer_cls(
            model=model if model is not None else tiny_causal_lm("llama"),
            args=args,
            train_dataset=train_dataset if train_dataset is not None else successor_dataset(64),
            eval_dataset=eval_dataset,
            processing_class=tiny_tokenizer(),
        )

    return make


def duals(log_history, key_prefix="dual/"):
    """Per-step multipliers from a run logged every step: {step: {layer: lambda}}."""
    return {
        row["step"]: {k: v for k, v in row.items() if k.startswith(key_prefix)}
        for row in log_history
        if any(k.startswith(key_prefix) for k in row)
    }


def full_and_resumed(make_trainer, tmp_path, stop_at: int, **config):
    """(a run trained to the end, the same run stopped after optimizer step `stop_at` and resumed from that step's
    checkpoint): the pair a bit-exact resume test compares. `config` must save a checkpoint at `stop_at`."""
    from transformers import TrainerCallback

    class Stop(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == stop_at:
                control.should_training_stop = True

    full = make_trainer(**config, output_dir=str(tmp_path / "full"))
    full.train()
    cut = make_trainer(**config, output_dir=str(tmp_path / "cut"))
    cut.add_callback(Stop())
    cut.train()
    resumed = make_trainer(**config, output_dir=str(tmp_path / "cut"))
    resumed.train(resume_from_checkpoint=str(tmp_path / "cut" / f"checkpoint-{stop_at}"))
    return full, resumed


@pytest.fixture(scope="session")
def slurm():
    """A real one-node Slurm cluster (tests/slurm_cluster.py), reached through SLURM_CONF for the session; skipped
    where the machine cannot start one, unless CONSTRAINED_SFT_REQUIRE_SLURM=1 (`.ci/run`), where that fails."""
    import slurm_cluster

    if reason := slurm_cluster.missing_reason():
        if os.environ.get("CONSTRAINED_SFT_REQUIRE_SLURM"):
            pytest.fail(f"CONSTRAINED_SFT_REQUIRE_SLURM is set but there is {reason}")
        pytest.skip(reason)
    cluster = slurm_cluster.start()
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = cluster.conf
    try:
        yield cluster
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        cluster.stop()
