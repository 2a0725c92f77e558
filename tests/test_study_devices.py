"""A study's `--jobs` workers on a machine with several GPUs (the device count given: no GPU here): each holds its own
group of `--gpus_per_run` devices for its life, so no job lands on devices another job holds, and the plan prices
runs on separate devices as not sharing; a run with `--gpus_per_run 2` trains under `accelerate launch` (two gloo
CPU processes here). The gpu-marked test checks the assignment on real devices."""

import json

import pytest
from test_study import assets as assets  # noqa: F401 (the tiny model, encoder, rows and recipes)
from test_study import study_argv

from constrained_sft.launch.devices import DeviceSlots, Machine, held
from constrained_sft.study.schedule import Estimate, fitting, worker_pool

FOUR = ["0", "1", "2", "3"]


def test_the_groups_each_worker_holds():
    assert DeviceSlots.assign(FOUR, 4, 1).groups == (("0",), ("1",), ("2",), ("3",))
    two = DeviceSlots.assign(FOUR, 2, 2)
    assert (
        two.groups == (("0", "1"), ("2", "3")) and two.sharing == 1 and [two.of(w) for w in (0, 1)] == list(two.groups)
    )
    shared = DeviceSlots.assign(FOUR, 3, 2)  # three runs of two GPUs on four: two share a group
    assert (
        shared.sharing == 2
        and shared.of(2) == ("0", "1")
        and "2 runs sharing each of GPU 0+1, GPU 2+3" in shared.describe()
    )
    assert DeviceSlots.assign(FOUR, 8, 1).sharing == 2
    cpu = DeviceSlots.assign([], 3, 1)
    assert cpu.groups == () and cpu.of(1) == () and cpu.sharing == 3 and cpu.describe() == "sharing this machine"
    with pytest.raises(ValueError, match=r"`--gpus_per_run` 8: this machine has 4 GPU\(s\) \(0, 1, 2, 3\)"):
        DeviceSlots.assign(FOUR, 1, 8)
    assert DeviceSlots.assign(FOUR, 2, 1).describe() == "each on its own device(s) (GPU 0, GPU 1)"  # fmt: skip
    with pytest.raises(ValueError, match=r"`--gpus_per_run` 1000000000: this machine has no GPU, .* it has \d+"):
        DeviceSlots.assign([], 1, 10**9)  # without GPUs a run's processes are CPU processes, one per core


def test_a_gpu_named_twice_is_refused(monkeypatch):
    from constrained_sft.launch.devices import visible_devices

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,0")
    with pytest.raises(ValueError, match=r"CUDA_VISIBLE_DEVICES=0,1,0 names GPU 0 more than once"):
        visible_devices()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert visible_devices() == ["2", "3"]


def test_runs_on_their_own_devices_are_priced_as_not_sharing():
    """A phase measured alone costs its seconds on each of four GPUs; four runs on one device cost four times as
    long each: the budget fits all four runs side by side only where the machine has the devices."""
    from constrained_sft.comparison import RunKey
    from constrained_sft.study.phases import Job

    est = Estimate([("erm", "train", 100.0, 1)], {}, "test")
    queue = [Job("s", "sft", RunKey(seed, "erm"), None, None) for seed in range(4)]  # type: ignore[arg-type]
    on_four, on_one = Machine(tuple(FOUR)), Machine(())
    assert on_four.sharing(4) == 1 and on_one.sharing(4) == 4
    assert len(fitting(queue, est, 4, 150.0, on_four.sharing)) == 4
    assert len(fitting(queue, est, 4, 150.0, on_one.sharing)) == 0


def hold(barrier) -> tuple[int, str | None]:
    """What a worker holds, once every worker holds a job (the barrier: no worker can take two of the first round)."""
    barrier.wait(timeout=60)
    return held()


def test_each_worker_holds_its_own_devices_for_its_life():
    """Two rounds of two jobs, each round held at a barrier until both workers hold one: every worker sees one
    group, the same in both rounds, and the two workers different groups."""
    from multiprocessing import get_context

    slots = DeviceSlots.assign(FOUR, 2, 2)
    context = get_context("spawn")
    with context.Manager() as manager, worker_pool(slots, threads=1, context=context) as pool:
        barrier = manager.Barrier(2)
        rounds = [dict(f.result() for f in [pool.submit(hold, barrier) for _ in range(2)]) for _ in range(2)]
    assert rounds[0] == rounds[1] and sorted(rounds[0].values()) == ["0,1", "2,3"]


def test_a_run_on_two_devices_trains_under_accelerate_launch(assets, tmp_path, capsys):  # noqa: F811
    from constrained_sft.cli import main as cli

    out = tmp_path / "study"
    argv = study_argv(assets, out, "--training_seeds", "1", "--stage", "train", "--gpus_per_run", "2")
    assert cli(argv) == 0
    printed = capsys.readouterr().out
    assert "constrained/seed0: training on 2 processes (accelerate launch --config_file " in printed
    assert "ddp.yaml)" in printed  # the recipe's first line names none: data parallel
    for arm in ("constrained", "erm"):
        assert json.loads((out / "train" / arm / "seed0" / "training_args.json").read_text())["max_steps"] == 3
    assert not list(out.rglob("*.launch.json"))  # the job handed to the launch, removed after it


def device_uuid(barrier) -> str:
    """The GPU this worker computes on, once both workers hold a job."""
    import torch

    barrier.wait(timeout=60)
    return str(torch.cuda.get_device_properties(0).uuid)


@pytest.mark.gpu
def test_each_worker_sees_its_own_gpu():
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    from multiprocessing import get_context

    slots = Machine(tuple(str(i) for i in range(torch.cuda.device_count()))).slots(2)
    context = get_context("spawn")
    with context.Manager() as manager, worker_pool(slots, threads=1, context=context) as pool:
        barrier = manager.Barrier(2)
        uuids = [f.result() for f in [pool.submit(device_uuid, barrier) for _ in range(2)]]
    assert len(set(uuids)) == 2  # the two workers, busy at once, on two different GPUs
