"""
Host-device syncs of a constrained training step, counted on CPU against a plain `SFTTrainer` step.

On a GPU these calls make the host wait for the device: reading a device value (`.item()`, `.tolist()`, `.cpu()`,
`float()`, `bool()` of a tensor, `.numpy()`), a data-dependent shape (`nonzero`, a boolean mask index,
`masked_select`) and a blocking host -> device copy (`torch.tensor(data, device=d)`, `.to(d)` of a host tensor).
On CPU none of them waits, but every one of them is a call `TorchFunctionMode` sees, so they can be counted here,
in CI, without a GPU. Tensors computed on the host (after `.cpu()`, or built without a device and only from host
tensors) are followed so that their reads are not counted: they cost no sync on a GPU either.

The budget (the issue's): the constrained step may add a constant number per optimizer step (the dual step's one
device -> host copy, the penalty coefficients' one host -> device copy) and nothing per measured layer or, with the
default sampled readouts, per micro-batch. Reading out every token adds one per micro-batch, pinned and named below,
so that a new one fails this test.
"""

import collections
import weakref

import pytest
import torch
from conftest import config_kwargs
from torch.overrides import TorchFunctionMode
from trl import SFTConfig, SFTTrainer

from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

READS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy", "cpu"}
SHAPES = {"nonzero", "masked_select", "argwhere", "unique", "bincount"}
COPIES = {"tensor", "as_tensor"}  # from Python data: with a device, a host -> device copy (so is `new_tensor`)


class SyncCounter(TorchFunctionMode):
    """Counts the calls that force a host-device sync on a GPU (see the module docstring), by kind."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter = collections.Counter()
        self._host: dict[int, weakref.ref] = {}  # id -> weak reference (tensors compare by value, not identity)

    def mark_host(self, tensor: torch.Tensor, host: bool = True) -> None:
        if host:
            self._host[id(tensor)] = weakref.ref(tensor)
        else:
            self._host.pop(id(tensor), None)

    def _is_host(self, value) -> bool:
        ref = self._host.get(id(value)) if isinstance(value, torch.Tensor) else None
        return ref is not None and ref() is value

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        flat = [b for a in (*args, *kwargs.values()) for b in (a if isinstance(a, (list, tuple)) else (a,))]
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]  # torch.stack / cat take a list
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        on_device = first is not None and not self._is_host(first)
        if name in READS | SHAPES and on_device:
            self.counts[name] += 1
        elif name == "__getitem__" and on_device:
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index):
                self.counts["boolean index"] += 1
        # `.to(device)` / `.to(tensor)`: the library writes the host as the string "cpu"; a torch.device or a tensor
        # not followed as host stands for the accelerator (on CPU they are the same device)
        targets = [*args[1:], kwargs.get("device")]
        device_target = any(isinstance(a, torch.device) or (isinstance(a, str) and a != "cpu") for a in targets)
        device_target = device_target or any(isinstance(a, torch.Tensor) and not self._is_host(a) for a in targets)
        if name == "to" and first is not None and self._is_host(first) and device_target:
            self.counts["host -> device copy"] += 1
        if name in COPIES and kwargs.get("device") is not None and not tensors:
            self.counts["host -> device copy"] += 1
        if name == "new_tensor" and on_device:
            self.counts["host -> device copy"] += 1
        result = func(*args, **kwargs)
        # follow host tensors: `.cpu()`, built without a device from host inputs only, or derived only from host ones
        host_result = name in ("cpu", "numpy") or (
            name != "to" and "device" not in kwargs and all(self._is_host(t) for t in tensors)
        )
        if name == "to":  # `.to(a host tensor)` of a host tensor stays on the host; anything else may move it
            host_result = first is not None and self._is_host(first) and not device_target
        outputs = result if isinstance(result, (tuple, list)) else (result,)
        for out in outputs:
            if isinstance(out, torch.Tensor):
                self.mark_host(out, host_result)
        return result

    def total(self) -> int:
        return sum(self.counts.values())


def _counts(tmp_path, kind: str, steps: int, accumulation: int, layers: int, **overrides) -> collections.Counter:
    kwargs = config_kwargs(
        tmp_path / f"{kind}-{steps}-{accumulation}-{layers}",
        max_steps=steps,
        gradient_accumulation_steps=accumulation,
        per_device_train_batch_size=2,
        logging_steps=10**6,  # logging reads the statistics, once per logging step: outside this budget
        **overrides,
    )
    trainer_class, config_class = (
        (SFTTrainer, SFTConfig) if kind == "plain" else (ConstrainedSFTTrainer, ConstrainedSFTConfig)
    )
    trainer = trainer_class(
        model=tiny_causal_lm("llama", num_layers=layers), args=config_class(**kwargs),
        train_dataset=successor_dataset(64), processing_class=tiny_tokenizer(),
    )  # fmt: skip
    counter = SyncCounter()
    if kind != "plain":  # the multipliers and the dual optimizer's state live on the host by design
        trainer.primal_dual.multipliers.weight.data.fill_(0.5)  # an active penalty from the first step
        assert trainer.primal_dual.multipliers.weight.device.type == "cpu"
        counter.mark_host(trainer.primal_dual.multipliers.weight)
    prepare = trainer._prepare_inputs

    def on_device(inputs):  # on a GPU the batch is moved to the device here; on CPU `.to` may return it as it is
        inputs = prepare(inputs)
        for value in inputs.values():
            if isinstance(value, torch.Tensor):
                counter.mark_host(value, False)
        return inputs

    trainer._prepare_inputs = on_device
    with counter:
        trainer.train()
    return counter.counts


def per_step(tmp_path, kind, accumulation, layers, **overrides) -> collections.Counter:
    """Counts of one optimizer step: (4 steps - 2 steps) / 2, so that setup and teardown cancel."""
    short = _counts(tmp_path, kind, 2, accumulation, layers, **overrides)
    long = _counts(tmp_path, kind, 4, accumulation, layers, **overrides)
    return collections.Counter({k: (long[k] - short[k]) / 2 for k in set(long) | set(short) if long[k] != short[k]})


@pytest.mark.parametrize("tokens", ["all", "sampled"])
def test_constrained_step_adds_no_sync_per_layer_nor_per_sampled_micro_batch(tmp_path, tokens):
    overrides = {"layer_loss_tokens": None} if tokens == "all" else {"layer_loss_tokens": 2}
    extra = {}
    for accumulation, layers in [(1, 2), (4, 2), (4, 4)]:
        plain = per_step(tmp_path, "plain", accumulation, layers)
        ours = per_step(tmp_path, "constrained", accumulation, layers, **overrides)
        extra[accumulation, layers] = ours
        extra[accumulation, layers].subtract(plain)
    # none per layer: 2 and 4 layers add the same
    assert +extra[4, 2] == +extra[4, 4], extra
    # per micro-batch: a sample (the default) has static shapes and adds none; every token compacts the supervised
    # positions with one `nonzero` (`select_tokens`: reading out padding and prompt positions would cost more)
    per_micro_batch = collections.Counter({k: (extra[4, 2][k] - extra[1, 2][k]) / 3 for k in extra[4, 2]})
    expected = {"nonzero": 1} if tokens == "all" else {}
    assert {k: v for k, v in per_micro_batch.items() if v} == expected, per_micro_batch
    # per optimizer step, beyond those: the statistics' one read and the coefficients' one copy
    per_step_only = {k: v - per_micro_batch[k] for k, v in extra[1, 2].items() if v - per_micro_batch[k]}
    assert sum(per_step_only.values()) <= 2, per_step_only
