"""Two data-parallel CPU processes (gloo) hold identical multipliers, equal to one process on the same global batch."""

import json
import os
import subprocess
import sys

import pytest
from conftest import launch_on_cpu

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "train_tiny.py")


def _run(tmp_path, name, processes, per_device):
    out = tmp_path / name
    overrides = json.dumps({"output_dir": str(out), "per_device_train_batch_size": per_device})
    if processes == 1:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
        cmd = [sys.executable, SCRIPT, str(out), overrides]
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    else:
        result = launch_on_cpu(processes, SCRIPT, str(out), overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads((tmp_path / f"{name}.rank{r}.json").read_text()) for r in range(processes)]


def test_ddp_multipliers_match_across_ranks_and_single_process(tmp_path):
    two = _run(tmp_path, "ddp", processes=2, per_device=2)
    one = _run(tmp_path, "single", processes=1, per_device=4)
    assert [r["world_size"] for r in two] == [2, 2]
    assert all(r["distributed_type"] == "DistributedType.MULTI_CPU" for r in two)  # really one process group
    assert two[0]["trajectory"] == two[1]["trajectory"]  # bitwise identical on both ranks
    assert len(one[0]["trajectory"]) == 4
    for a, b in zip(two[0]["trajectory"], one[0]["trajectory"], strict=True):
        assert a == pytest.approx(b, abs=1e-6)
    assert max(two[0]["trajectory"][-1]) > 0  # the constraints were active, so the test compares real updates
