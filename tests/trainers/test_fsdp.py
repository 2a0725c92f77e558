"""
FSDP2 without a GPU: two gloo CPU processes launched with the repository's `accelerate_configs/fsdp2.yaml` (2
processes, `use_cpu`, rank-0 loading off: the tiny model is built in code). accelerate applies its FSDP plugin only on
accelerators, so the launch script turns the state to FSDP itself (`tests/scripts/train_tiny.py::fsdp_on_cpu`) and
accelerate's own FSDP2 preparation shards the model: parameters, gradients and the clipped gradient norm are DTensors,
the readouts gather the sharded LM head in the forward, the multipliers are reduced over both ranks and saved and
loaded in checkpoints. The GPU run of the same config is `tests/trainers/test_gpu.py`.
"""

import json
import os
import shutil

import pytest
import yaml
from conftest import hang_limit, launch_on_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "scripts", "train_tiny.py")
# the DDP test's run, with training noise (its streams must survive the resume too) and a checkpoint every 2 steps
RUN = {"per_device_train_batch_size": 2, "layer_loss_tokens": 2, "noise_gamma": 1.0}


def _config(tmp_path) -> str:
    with open(os.path.join(ROOT, "accelerate_configs", "fsdp2.yaml")) as f:
        config = yaml.safe_load(f)
    config.update(num_processes=2, use_cpu=True)
    config["fsdp_config"]["fsdp_cpu_ram_efficient_loading"] = False  # the model is built in code on every rank
    path = tmp_path / "fsdp2.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _launch(tmp_path, name: str, fsdp: bool, **overrides) -> list[dict]:
    settings = {"output_dir": str(tmp_path / "run"), **RUN, **overrides}
    if fsdp:
        settings["_fsdp_on_cpu"] = True
    config = _config(tmp_path) if fsdp else None
    result = launch_on_cpu(
        2, SCRIPT, str(tmp_path / name), json.dumps(settings), timeout=hang_limit(30), config_file=config
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads((tmp_path / f"{name}.rank{r}.json").read_text()) for r in range(2)]


def test_fsdp2_matches_data_parallel_and_resumes_exactly(tmp_path):
    fsdp = _launch(tmp_path, "fsdp", True, save_strategy="steps", save_steps=2)
    assert all(r["distributed_type"] == "DistributedType.FSDP" and r["world_size"] == 2 for r in fsdp)
    assert all(r["lm_head_sharded"] and r["probe_sharded"] for r in fsdp)  # really sharded: the head is a DTensor
    assert fsdp[0]["trajectory"] == fsdp[1]["trajectory"] and len(fsdp[0]["trajectory"]) == 4
    assert max(fsdp[0]["trajectory"][-1]) > 0  # the constraints were active: real multiplier updates compared

    ddp = _launch(tmp_path / "ddp", "ddp", False)
    for ours, theirs in zip(fsdp[0]["trajectory"], ddp[0]["trajectory"], strict=True):
        assert ours == pytest.approx(theirs, rel=1e-4, abs=1e-6)

    # killed after step 2: its later checkpoint is gone; resuming the newest left gives the same run
    shutil.rmtree(tmp_path / "run" / "checkpoint-4")
    checkpoint = str(tmp_path / "run" / "checkpoint-2")
    resumed = _launch(
        tmp_path, "resumed", True, save_strategy="steps", save_steps=2, resume_from_checkpoint=checkpoint
    )
    assert resumed[0]["trajectory"] == resumed[1]["trajectory"] == fsdp[0]["trajectory"]
