"""Two data-parallel CPU processes (gloo) hold identical multipliers, equal to one process on the same global batch."""

import json
import os
import subprocess
import sys

import pytest
from conftest import hang_limit, launch_on_cpu

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "train_tiny.py")


def _run(tmp_path, name, processes, per_device, **settings):
    out = tmp_path / name
    overrides = json.dumps(  # 2 of each row's 7 supervised tokens: the sample must not depend on the rank split
        {"output_dir": str(out), "per_device_train_batch_size": per_device, "layer_loss_tokens": 2, **settings}
    )
    if processes == 1:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
        cmd = [sys.executable, SCRIPT, str(out), overrides]
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=hang_limit(60))
    else:
        result = launch_on_cpu(processes, SCRIPT, str(out), overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads((tmp_path / f"{name}.rank{r}.json").read_text()) for r in range(processes)]


def test_ddp_multipliers_match_across_ranks_and_single_process(tmp_path, data_parallel_ranks):
    two = data_parallel_ranks  # `_run(tmp_path, "ddp", processes=2, per_device=2)`, shared with the DeepSpeed tests
    one = _run(tmp_path, "single", processes=1, per_device=4)
    assert [r["world_size"] for r in two] == [2, 2]
    assert all(r["distributed_type"] == "DistributedType.MULTI_CPU" for r in two)  # really one process group
    assert not any(r["probe_sharded"] for r in two)  # nothing gathered per readout call: no all-reduce to size them
    assert two[0]["trajectory"] == two[1]["trajectory"]  # bitwise identical on both ranks
    assert len(one[0]["trajectory"]) == 4
    for a, b in zip(two[0]["trajectory"], one[0]["trajectory"], strict=True):
        assert a == pytest.approx(b, abs=1e-6)
    assert max(two[0]["trajectory"][-1]) > 0  # the constraints were active, so the test compares real updates


@pytest.mark.parametrize(
    "settings",
    [{"dual_optimizer": "nupi", "nupi_kp": 2.0}, {"dual_optimizer": "augmented_lagrangian", "alm_growth": 1.5}],
    ids=["nupi", "augmented_lagrangian"],
)
def test_nupi_and_the_augmented_lagrangian_keep_the_ranks_identical(tmp_path, settings):
    """Both ranks take the same dual steps. nuPI's objective is linear in the losses, so two ranks also equal one
    process on the same global batch; the augmented term weighs each rank's micro-batch by its own constraint
    values, so there the ranks agree with each other only."""
    two = _run(tmp_path, "ddp", processes=2, per_device=2, **settings)
    assert two[0]["trajectory"] == two[1]["trajectory"] and max(two[0]["trajectory"][-1]) > 0
    if settings["dual_optimizer"] == "nupi":
        one = _run(tmp_path, "single", processes=1, per_device=4, **settings)
        for a, b in zip(two[0]["trajectory"], one[0]["trajectory"], strict=True):
            assert a == pytest.approx(b, abs=1e-6)


def test_a_rank_without_supervised_tokens_enters_every_collective(tmp_path):
    """One rank's batches are fully masked, training noise leaves some examples clean, and the sample size differs
    across ranks; with a simulated sharded head (a collective per readout call, forward and backward, and per
    sigma_x measurement) both ranks must finish, bounded in time, with identical multipliers."""
    out = tmp_path / "uneven"
    overrides = {
        "output_dir": str(out), "per_device_train_batch_size": 2, "layer_loss_tokens": None,
        "noise_gamma": [0.0, 1.0], "noise_clean_prob": 0.5,
        "_sharded_head": True, "_masked_rank": 1, "_stack_rows": 8,
    }  # fmt: skip
    try:
        result = launch_on_cpu(2, SCRIPT, str(out), json.dumps(overrides), timeout=hang_limit(24))
    except subprocess.TimeoutExpired:
        pytest.fail("a rank waited in a collective the other never entered (hang)")
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"uneven.rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["trajectory"] == ranks[1]["trajectory"] and len(ranks[0]["trajectory"]) == 4
    assert max(ranks[0]["trajectory"][-1]) > 0  # the constraints were active


def test_processes_that_accelerate_runs_alone_are_refused(tmp_path):
    """A 2-process launch that accelerate does not make distributed (no GPU, `use_cpu` off, no backend named) used to
    train two separate models that raced on the same files: now every rank refuses before training."""
    config = tmp_path / "gpu_ddp.yaml"  # the repository's ddp.yaml as a user copies it: MULTI_GPU, use_cpu false
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_machines: 1\n"
                      "num_processes: 2\nmixed_precision: 'no'\nuse_cpu: false\n")  # fmt: skip
    out = tmp_path / "alone"
    overrides = json.dumps({"output_dir": str(out), "use_cpu": False})
    result = launch_on_cpu(2, SCRIPT, str(out), overrides, timeout=hang_limit(24), config_file=str(config))
    assert result.returncode != 0
    assert "2 processes were launched, but accelerate runs this one alone" in result.stderr
    assert not (tmp_path / "alone.rank0.json").exists() and not (out / "constraints.json").exists()


def test_an_fsdp_launch_without_a_gpu_is_refused(monkeypatch):
    import torch

    from constrained_sft import ConstrainedSFTConfig

    if torch.cuda.is_available():
        pytest.skip("the refusal is for machines without a GPU")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ValueError, match="FSDP needs a GPU"):
        ConstrainedSFTConfig(output_dir="unused", bf16=False, report_to="none")
