"""
Train the tiny model with given config overrides and dump each rank's multiplier trajectory (test_ddp,
test_deepspeed).

Overrides whose key starts with "_" set up the run rather than the config:
- `_sharded_head`: every readout call and every sigma_x measurement enters a collective (an all-reduce in the
  forward and in the backward), as the LM-head and embedding gathers of ZeRO-3 / FSDP do, so ranks that make
  different numbers of such calls deadlock or fail instead of passing silently on CPU (and the probe is told the head
  is sharded, as the trainer tells it under DeepSpeed / FSDP);
- `_masked_rank`: that rank's batches have no supervised token at all;
- `_stack_rows`: rows per stacked readout call (small values make the number of calls depend on the sample size).
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
    trajectory = [trainer.primal_dual.history[i]["dual"] for i in range(len(trainer.primal_dual.history))]
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
