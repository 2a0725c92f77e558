"""
DeepSpeed ZeRO-2 and ZeRO-3 on CPU: two processes on DeepSpeed's CPU accelerator (gloo), launched with the
repository's own accelerate configs. The `deepspeed` package is a dev dependency, so these run in CI, never skipped.

Under ZeRO-3 every rank holds a partition of the LM head; the readout gathers it (and the final norm) inside the
model's forward, a collective per readout call: the multipliers must match plain data parallelism on the same
global batch, and a rank without supervised tokens must still enter every gather.
"""

import json
import os

import pytest
import yaml
from conftest import hang_limit, launch_on_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "scripts", "train_tiny.py")
# 2 rows per rank and step, 2 of each row's supervised tokens read per layer: the DDP test's run
RUN = {"per_device_train_batch_size": 2, "layer_loss_tokens": 2}


def _launch(tmp_path, name: str, config: str | None, **overrides) -> list[dict]:
    import deepspeed  # noqa: F401  (a dev dependency: a missing install fails here, by name)

    out = tmp_path / name
    settings = {"output_dir": str(out), **RUN, **overrides}
    config_file = _config(tmp_path, config) if config else None
    if config:  # accelerate turns DeepSpeed off under `use_cpu`; the config check picks gloo without a GPU
        settings["use_cpu"] = False
    result = launch_on_cpu(2, SCRIPT, str(out), json.dumps(settings), timeout=hang_limit(60), config_file=config_file)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads((tmp_path / f"{name}.rank{r}.json").read_text()) for r in range(2)]


def _config(tmp_path, config: str) -> str:
    """The repository's accelerate config; for ZeRO-3, its DeepSpeed section as a DeepSpeed JSON that also
    partitions small parameters (the default persistence threshold, 1e5 elements, would leave the tiny model's
    [32, 64] head whole on every rank, and the gathers untested)."""
    path = os.path.join(ROOT, "accelerate_configs", f"{config}.yaml")
    if config != "deepspeed_zero3":
        return path
    with open(path) as f:
        accelerate = yaml.safe_load(f)
    section = accelerate["deepspeed_config"]
    zero = {"stage": 3, "stage3_param_persistence_threshold": 0}
    zero["stage3_gather_16bit_weights_on_model_save"] = section["zero3_save_16bit_model"]
    batch = {k: "auto" for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")}
    ds_json = tmp_path / "zero3.json"
    ds_json.write_text(json.dumps({"zero_optimization": zero, **batch, "gradient_clipping": "auto"}))
    accelerate["deepspeed_config"] = {"deepspeed_config_file": str(ds_json), "zero3_init_flag": True}
    accelerate.pop("mixed_precision")  # accelerate refuses it beside a DeepSpeed file (fp32 there: no bf16 section)
    out = tmp_path / "zero3.yaml"
    out.write_text(yaml.safe_dump(accelerate))
    return str(out)


@pytest.fixture
def ddp(data_parallel_ranks):
    """`_launch(..., "ddp", None)`: the DDP test's run (tests/conftest.py), launched once for both files."""
    return data_parallel_ranks


@pytest.mark.parametrize("stage", ["deepspeed_zero2", "deepspeed_zero3"])
def test_zero_stage_matches_data_parallel(tmp_path, ddp, stage):
    ranks = _launch(tmp_path, stage, stage)
    assert all(r["distributed_type"] == "DistributedType.DEEPSPEED" and r["world_size"] == 2 for r in ranks)
    assert ranks[0]["lm_head_partitioned"] == (stage == "deepspeed_zero3")  # ZeRO-3 really shards the head
    assert all(r["probe_sharded"] for r in ranks)  # so every rank sizes its readout calls alike
    assert ranks[0]["trajectory"] == ranks[1]["trajectory"]  # bitwise identical on both ranks
    assert len(ranks[0]["trajectory"]) == len(ddp[0]["trajectory"]) == 4
    for ours, theirs in zip(ranks[0]["trajectory"], ddp[0]["trajectory"], strict=True):
        assert ours == pytest.approx(theirs, rel=1e-4, abs=1e-6)
    assert max(ranks[0]["trajectory"][-1]) > 0  # the constraints were active: real multiplier updates compared


@pytest.mark.parametrize("dual_optimizer", ["nupi", "augmented_lagrangian"])
def test_dual_methods_under_zero2_keep_the_ranks_identical(tmp_path, dual_optimizer):
    """nuPI (its controller state) and the augmented Lagrangian (its penalty coefficients and per-micro-batch
    weights) under ZeRO-2: both ranks hold the same multipliers at every step."""
    own = {"alm_growth": 1.5} if dual_optimizer == "augmented_lagrangian" else {}  # nuPI: its default gains
    ranks = _launch(tmp_path, dual_optimizer, "deepspeed_zero2", dual_optimizer=dual_optimizer, **own)
    assert ranks[0]["trajectory"] == ranks[1]["trajectory"] and len(ranks[0]["trajectory"]) == 4
    assert max(ranks[0]["trajectory"][-1]) > 0


def test_zero3_trains_with_the_default_sample(tmp_path):
    """`layer_loss_tokens='auto'` (the default) sizes its sample from the LM head's shape, which ZeRO-3 leaves empty
    on each rank (this crashed at the first step); the config's shared row bound lets every rank make one readout
    call per forward, with no all-reduce to size it."""
    ranks = _launch(tmp_path, "zero3_auto", "deepspeed_zero3", layer_loss_tokens="auto")
    assert ranks[0]["lm_head_partitioned"] and all(r["probe_sharded"] for r in ranks)
    assert ranks[0]["rows_bound"] == ranks[1]["rows_bound"] and ranks[0]["rows_bound"] > 0
    assert ranks[0]["trajectory"] == ranks[1]["trajectory"] and max(ranks[0]["trajectory"][-1]) > 0


def test_zero3_rank_without_supervised_tokens_enters_every_gather(tmp_path):
    """Rank 1's batches are fully masked and training noise leaves some examples clean (its sigma_x read inside the
    same gather): both ranks must finish, bounded in time, with identical multipliers."""
    ranks = _launch(
        tmp_path, "masked", "deepspeed_zero3",
        _masked_rank=1, layer_loss_tokens=None, noise_gamma=[0.0, 1.0], noise_clean_prob=0.5,
    )  # fmt: skip
    assert ranks[0]["lm_head_partitioned"]
    assert ranks[0]["trajectory"] == ranks[1]["trajectory"] and len(ranks[0]["trajectory"]) == 4
    assert max(ranks[0]["trajectory"][-1]) > 0
