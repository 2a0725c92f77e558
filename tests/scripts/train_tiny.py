"""Train the tiny model with given config overrides and dump each rank's multiplier trajectory (used by test_ddp)."""

import json
import sys
import warnings

warnings.filterwarnings("ignore")

from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer  # noqa: E402
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer  # noqa: E402


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
    kwargs.update(json.loads(overrides))
    args = ConstrainedSFTConfig(**kwargs)
    trainer = ConstrainedSFTTrainer(
        model=tiny_causal_lm("llama"),
        args=args,
        train_dataset=successor_dataset(64),
        processing_class=tiny_tokenizer(),
    )
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
            },
            f,
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
