import contextlib
import os
import sys
import warnings

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# every test that asks for a help sees it built from the parsers, never a text cached by an earlier run
# (tests/cli/test_imports.py turns the cache on, in a folder of its own)
os.environ["CONSTRAINED_SFT_HELP_CACHE"] = "0"
warnings.filterwarnings("ignore", category=FutureWarning)


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
    import subprocess

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


def launch_on_cpu(num_processes: int, *target: str, timeout: float = 600, config_file: str | None = None):
    """`accelerate launch --multi_gpu` (or with `config_file`) of `target` (a script and its arguments, or
    `-m module ...`) as `num_processes` gloo CPU processes; a crash at any rank prints its Python stack
    (faulthandler). A launch still running after `timeout` seconds fails the test with every process's native and
    Python stacks (py-spy, then SIGABRT through faulthandler) and the tail of its output, so a hang in CI says where
    each rank was."""
    import signal
    import subprocess

    if config_file is None:  # plain data parallel: gloo CPU processes
        how = ["--multi_gpu", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    else:  # an accelerate config (DeepSpeed: its CPU accelerator, over gloo); `use_cpu` must stay off for it
        how = ["--config_file", config_file]
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", *how, "--num_processes", str(num_processes),
        "--main_process_port", free_port(), *target,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    if config_file is None:
        env["ACCELERATE_USE_CPU"] = "true"
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
                f"`accelerate launch` still running after {timeout:g} s; the processes' stacks and output follow.\n"
                f"--- stdout (tail) ---\n{stdout[-4000:]}\n--- stderr (tail) ---\n{stderr[-12000:]}\n"
                f"--- native stacks (py-spy) ---\n{native[-12000:]}",
                pytrace=False,
            )
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


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
