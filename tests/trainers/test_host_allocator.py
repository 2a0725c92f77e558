"""`host_allocator`: CPU training reuses freed host memory instead of page-faulting it in again every step, when
asked: the command asks by default and applies it to the process it owns, before the task runs; a trainer built from
Python never changes its process (the field is the command's, not the training config's)."""

import json
import platform
import subprocess
import sys

import pytest
from conftest import config_kwargs

from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer
from constrained_sft.trainers import host_allocator

# made and freed 5 times, a 200 MB tensor (above glibc's mmap threshold, as a step's logits are): the page faults of
# each, printed as JSON
MEASURE = """
faults = []
for _ in range(5):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.ones(50_000_000)
    del x
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(faults))
"""
FAULTS = (
    """
import json, resource, sys, torch
if sys.argv[1] == "reuse":
    from constrained_sft.trainers.host_allocator import reuse_freed_host_memory
    assert reuse_freed_host_memory() and reuse_freed_host_memory()  # applies, and is idempotent
"""
    + MEASURE
)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_reuse_stops_the_page_faults_of_a_freed_tensor_made_again():
    """The real effect, in a fresh process (the setting is process-wide): with the system allocator every 200 MB
    tensor faults in its ~49k pages again; with 'reuse' the heap grows over the first ones (glibc places the first
    blocks before the freed top is reused) and then none does."""
    runs = {}
    for mode in ("system", "reuse"):
        out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True)
        runs[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    pages = 50_000_000 * 4 // 4096
    assert all(f > pages * 0.9 for f in runs["system"]), runs
    assert runs["reuse"][0] > pages * 0.9 and max(runs["reuse"][-2:]) < pages * 0.1, runs


def test_a_trainer_built_from_python_never_changes_its_process(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(host_allocator, "reuse_freed_host_memory", lambda: calls.append(1) or True)
    args = ConstrainedSFTConfig(**config_kwargs(tmp_path, max_steps=1))
    ConstrainedSFTTrainer(
        model=tiny_causal_lm("llama"), args=args, train_dataset=successor_dataset(8), processing_class=tiny_tokenizer()
    ).train()
    assert calls == []  # the process is the user's: only the command, which owns its process, applies it
    assert not hasattr(args, "host_allocator")


@pytest.mark.parametrize("flags", [[], ["--host_allocator", "system"]])
def test_the_command_reuses_freed_memory_unless_told_otherwise(tmp_path, monkeypatch, flags):
    """The command owns its process: an unset `host_allocator` is 'reuse' there."""
    from constrained_sft.cli import main

    calls = []
    monkeypatch.setattr(host_allocator, "reuse_freed_host_memory", lambda: calls.append(1) or True)
    tiny_causal_lm("llama").save_pretrained(tmp_path / "model")
    tiny_tokenizer().save_pretrained(tmp_path / "model")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in successor_dataset(16)))
    argv = [
        "train", "--model_name_or_path", str(tmp_path / "model"), "--dataset_name", str(data), "--output_dir",
        str(tmp_path / "out"), "--max_steps", "1", "--per_device_train_batch_size", "4", "--bf16", "false",
        "--use_cpu", "true", "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true", *flags,
    ]  # fmt: skip
    assert main(argv) == 0
    assert calls == ([] if flags else [1])


TRAIN_THEN_FAULTS = (
    """
import json, resource, sys, torch
from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer
args = ConstrainedSFTConfig(output_dir=sys.argv[1], report_to="none", bf16=False, use_cpu=True, save_strategy="no",
                            max_steps=2, per_device_train_batch_size=4, disable_tqdm=True)
ConstrainedSFTTrainer(model=tiny_causal_lm("llama"), args=args, train_dataset=successor_dataset(16),
                      processing_class=tiny_tokenizer()).train()
"""
    + MEASURE
)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_training_from_python_leaves_the_process_allocator_as_it_was(tmp_path):
    """After a default run from Python, a freed 200 MB tensor still goes back to the system (its pages fault in again
    when it is made again), as before the run: the library changed nothing process-wide."""
    out = subprocess.run(
        [sys.executable, "-c", TRAIN_THEN_FAULTS, str(tmp_path)], capture_output=True, text=True, check=True
    )
    faults = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(f > 50_000_000 * 4 // 4096 * 0.9 for f in faults), faults


def test_an_unknown_allocator_is_refused_naming_the_field(tmp_path):
    from constrained_sft.config import ProcessArguments

    with pytest.raises(ValueError, match=r"`host_allocator` must be one of \['reuse', 'system'\], got 'jemalloc'"):
        ProcessArguments(host_allocator="jemalloc")
