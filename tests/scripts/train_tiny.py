"""
Train the tiny model with given config overrides and dump each rank's multiplier trajectory (test_ddp,
test_deepspeed).

Overrides whose key starts with "_" set up the run rather than the config:
- `_sharded_head`: every readout call and every sigma_x measurement enters a collective (an all-reduce in the
  forward and in the backward), as the LM-head and embedding gathers of ZeRO-3 / FSDP do, so ranks that make
  different numbers of such calls deadlock or fail instead of passing silently on CPU (and the probe is told the head
  is sharded, as the trainer tells it under DeepSpeed / FSDP);
- `_masked_rank`: that rank's batches have no supervised token at all;
- `_stack_rows`: rows per stacked readout call (small values make the number of calls depend on the sample size);
- `_fsdp_on_cpu`: under an FSDP launch, shard the model with accelerate's own FSDP2 preparation on these gloo CPU
  processes (see `fsdp_on_cpu`).
"""

import contextlib
import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling  # noqa: E402

from constrained_sft import CausalLMReadout, ConstrainedSFTConfig, ConstrainedSFTTrainer  # noqa: E402
from constrained_sft.noise import embedding as noise_module  # noqa: E402
from constrained_sft.readout import layer_losses  # noqa: E402
from constrained_sft.tasks.training import finish  # noqa: E402
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer  # noqa: E402


def _collective() -> None:
    dist.all_reduce(torch.ones(1))


class _Gathered(torch.autograd.Function):
    """Identity whose forward and backward each enter a collective, like a ZeRO-3 head gathered in both passes."""

    @staticmethod
    def forward(ctx, x):
        _collective()
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        _collective()
        return grad


def simulate_sharded_head() -> None:
    token_nll = CausalLMReadout.token_nll
    CausalLMReadout.token_nll = lambda self, hidden, *a, **kw: token_nll(self, _Gathered.apply(hidden), *a, **kw)

    @contextlib.contextmanager
    def gather(*_):
        _collective()
        yield

    noise_module.zero3_gathered = gather


class MaskRank:
    """A collator whose batches on one rank have no supervised token."""

    def __init__(self, base, rank: int) -> None:
        self.base, self.rank = base, rank

    def __call__(self, examples):
        batch = self.base(examples)
        if int(os.environ.get("RANK", 0)) == self.rank:
            batch["labels"][:] = -100
        return batch


def fsdp_on_cpu() -> None:
    """
    accelerate applies its FSDP plugin only on accelerators: on CPU processes its state stays MULTI_CPU and the model
    is wrapped in DDP, and this library's config refuses the launch for that reason. Here, for tests, the state is
    made FSDP once accelerate has built it from the launch's FSDP settings, so the trainer runs exactly as under an
    FSDP2 GPU launch (accelerate's `fsdp2_prepare_model`: `fully_shard` per decoder layer and the root, DTensor
    parameters, gradients and clipped norm) over gloo; the config's refusal is skipped for this process alone.
    """
    import accelerate.state as state
    from accelerate.utils import DistributedType

    from constrained_sft.config import run_fields

    build = state.AcceleratorState.__init__

    def build_fsdp(self, *args, fsdp_plugin=None, **kwargs):
        build(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin
            state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    state.AcceleratorState.__init__ = build_fsdp
    refuse = run_fields.deepspeed_without_gpu

    def without_the_fsdp_refusal(args) -> None:
        flag = os.environ.pop("ACCELERATE_USE_FSDP")
        try:
            refuse(args)
        finally:
            os.environ["ACCELERATE_USE_FSDP"] = flag

    run_fields.deepspeed_without_gpu = without_the_fsdp_refusal


def main(out_path: str, overrides: str) -> None:
    kwargs = dict(
        report_to="none",
        bf16=False,
        use_cpu=True,
        save_strategy="no",
        learning_rate=1e-2,
        logging_steps=1,
        max_steps=4,
        seed=0,
        disable_tqdm=True,
        dual_lr=0.5,
        descent_alpha=0.1,
    )
    setup = {k: v for k, v in json.loads(overrides).items() if k.startswith("_")}
    kwargs.update({k: v for k, v in json.loads(overrides).items() if not k.startswith("_")})
    if setup.get("_sharded_head"):
        simulate_sharded_head()
    if setup.get("_fsdp_on_cpu"):
        fsdp_on_cpu()
    if "_stack_rows" in setup:
        layer_losses.STACK_ROWS = setup["_stack_rows"]
    collator = None
    if "_masked_rank" in setup:
        collator = MaskRank(DataCollatorForLanguageModeling(pad_token_id=0), setup["_masked_rank"])
    # built before the config: under ZeRO-3, a model constructed after it is initialised inside deepspeed.zero.Init
    # with other random weights than the data-parallel run it is compared with
    model = tiny_causal_lm("llama")
    args = ConstrainedSFTConfig(**kwargs)
    trainer = ConstrainedSFTTrainer(
        model=model,
        args=args,
        train_dataset=successor_dataset(64),
        processing_class=tiny_tokenizer(),
        data_collator=collator,
    )
    if setup.get("_sharded_head"):
        trainer.probe.sharded = True  # what the trainer sets under DeepSpeed / FSDP, whose heads gather per call
    trainer.train()
    trajectory = [trainer.primal_dual.history[i].dual for i in range(len(trainer.primal_dual.history))]
    head = trainer.readout.lm_head.weight
    with open(f"{out_path}.rank{args.process_index}.json", "w") as f:
        json.dump(
            {
                "world_size": args.world_size,
                "trajectory": trajectory,
                "distributed_type": str(trainer.accelerator.distributed_type),
                "lm_head_sharded": type(head).__name__ == "DTensor",
                # ZeRO-3: this rank holds only its partition of the head (empty outside a gather)
                "lm_head_partitioned": hasattr(head, "ds_id") and head.numel() == 0,
                "probe_sharded": trainer.probe.sharded,
                "rows_bound": trainer._rows_bound,
            },
            f,
        )
    finish(trainer)  # the CLI's teardown: a group and DDP wrapper left to interpreter exit can abort the process


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
