"""
Streamed data through the trainers: the whole-dataset checks read Arrow columns on map-style data and move to the
batch on a stream, with the same one-line errors; classifier and denoiser streams train; the command line streams
local files with the held-out rows taken first. (The SFTTrainer drop-in matrix, streamed cases included, is
`test_drop_in_contract.py`; the streamed kill-and-resume is in `test_crash_resume.py`.)
"""

import json

import pytest
import torch
import transformers
from datasets import Dataset

from constrained_sft import ConstrainedConfig, ConstrainedSFTConfig, ConstrainedSFTTrainer, ConstrainedTrainer
from constrained_sft.models import DUSTConfig, DUSTForDenoising
from constrained_sft.testing import presence_dataset, tiny_causal_lm, tiny_encoder, tiny_tokenizer
from constrained_sft.trainers.sft import longest_row


def _config(tmp_path, cls=ConstrainedSFTConfig, **kw):
    fields = dict(
        output_dir=str(tmp_path / "out"), report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True,
        max_steps=2, per_device_train_batch_size=4, dual_lr=0.5,
    )  # fmt: skip
    if cls is ConstrainedSFTConfig:
        fields["bf16"] = False
    return cls(**{**fields, **kw})


def _long_rows(lengths: list[int]) -> Dataset:
    return Dataset.from_list([{"input_ids": [3 + i % 20 for i in range(n)]} for n in lengths])


def test_the_longest_row_is_read_with_arrow_on_the_selected_rows():
    rows = _long_rows([5, 300, 7, 9])
    assert longest_row(rows) == 300
    assert longest_row(rows.select([0, 2, 3])) == 9  # an indices mapping: only the selected rows count
    assert longest_row(rows.to_iterable_dataset()) is None  # a stream is checked batch by batch instead
    assert longest_row(Dataset.from_list([{"text": "a"}])) is None  # not tokenized yet


@pytest.mark.parametrize("streamed", [False, True])
def test_sequences_beyond_the_models_positions_are_refused_naming_max_length(tmp_path, streamed):
    """GPT-2's learned positions (256 here) would fail with an IndexError at the first long batch."""
    rows = _long_rows([8] * 7 + [300])
    data = rows.to_iterable_dataset() if streamed else rows
    args = _config(tmp_path, max_length=None, per_device_train_batch_size=8)
    build = lambda: ConstrainedSFTTrainer(  # noqa: E731
        model=tiny_causal_lm("gpt2"), args=args, train_dataset=data, processing_class=tiny_tokenizer()
    )
    with pytest.raises(ValueError, match=r"`max_length` None lets training sequences of 300 tokens through.*256"):
        build().train() if streamed else build()  # at construction, or at the first such batch of a stream


def test_a_streamed_classifier_trains_and_its_labels_are_checked_per_batch(tmp_path):
    collator = transformers.DataCollatorWithPadding(tiny_tokenizer())
    good = presence_dataset(32).to_iterable_dataset()
    trainer = ConstrainedTrainer(model=tiny_encoder(), args=_config(tmp_path, ConstrainedConfig), train_dataset=good,
                                 data_collator=collator)  # fmt: skip
    trainer.train()
    assert trainer.state.global_step == 2 and trainer.primal_dual.multipliers.value().gt(0).any()
    bad = presence_dataset(32).map(lambda r, i: {"labels": 5 if i == 6 else r["labels"]}, with_indices=True)
    trainer = ConstrainedTrainer(model=tiny_encoder(), args=_config(tmp_path, ConstrainedConfig),
                                 train_dataset=bad.to_iterable_dataset(), data_collator=collator)  # fmt: skip
    with pytest.raises(ValueError, match=r"streamed data, a batch's row 2: `labels` \[5.0\].*class ids 0..1"):
        trainer.train()
    with pytest.raises(ValueError, match=r"`train_dataset` row 6: `labels` \[5.0\]"):  # map-style: at construction
        ConstrainedTrainer(model=tiny_encoder(), args=_config(tmp_path, ConstrainedConfig), train_dataset=bad,
                           data_collator=collator)  # fmt: skip


def test_a_streamed_denoiser_trains(tmp_path):
    """Video clips `[T, 64]` as a stream (the denoisers' default collator stacks them), with pixel noise on."""
    torch.manual_seed(0)
    clips = torch.rand(32, 5, 64)
    data = Dataset.from_dict({"input_values": clips, "labels": clips}).to_iterable_dataset().with_format("torch")
    model = DUSTForDenoising(DUSTConfig(patch_size=8, dictionary_atoms_per_side=10, num_hidden_layers=3, data_std=0.2))
    args = _config(tmp_path, ConstrainedConfig, constraints="descent", dual_lr=0.1, noise_gamma=0.5)
    trainer = ConstrainedTrainer(model=model, args=args, train_dataset=data, loss="squared_error")
    trainer.train()
    assert trainer.state.global_step == 2 and trainer.noise_sigma == 0.2
    assert torch.isfinite(trainer.primal_dual.multipliers.value()).all()


def test_warmup_in_epochs_needs_a_length(tmp_path):
    with pytest.raises(ValueError, match="`constraint_warmup_epochs` counts epochs.*`constraint_warmup_steps`"):
        ConstrainedTrainer(
            model=tiny_encoder(), args=_config(tmp_path, ConstrainedConfig, constraint_warmup_epochs=1),
            train_dataset=presence_dataset(32).to_iterable_dataset(),
            data_collator=transformers.DataCollatorWithPadding(tiny_tokenizer()),
        )  # fmt: skip


def test_the_command_line_streams_a_file_holding_out_its_first_rows(tmp_path):
    from constrained_sft.cli import main
    from constrained_sft.data import DataArguments, DataError, load_train_eval

    path = tmp_path / "data.jsonl"
    rows = [{"prompt": f"s{i % 20} s{(i + 1) % 20} =", "completion": f" s{(i + 2) % 20}"} for i in range(20)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train, held_out = load_train_eval(DataArguments(dataset_name=str(path), streaming=True, eval_size=4))
    assert held_out.to_list() == rows[:4]  # in memory: the first rows, never trained on
    assert list(train) == rows[4:]  # still a stream, mapped lazily
    capped = load_train_eval(DataArguments(dataset_name=str(path), streaming=True, eval_size=4, max_train_samples=3))
    assert list(capped[0]) == rows[4:7]
    with pytest.raises(DataError, match="`eval_size` must be a whole number of rows >= 1 with `streaming`"):
        DataArguments(dataset_name=str(path), streaming=True, eval_size=0.1)
    model = tmp_path / "model"
    tiny_causal_lm("llama").save_pretrained(model)
    tiny_tokenizer().save_pretrained(model)
    argv = [
        "train", "--model_name_or_path", str(model), "--dataset_name", str(path), "--output_dir", str(tmp_path / "o"),
        "--streaming", "true", "--eval_size", "4", "--max_steps", "2", "--per_device_train_batch_size", "4",
        "--bf16", "false", "--use_cpu", "true", "--report_to", "none", "--save_strategy", "no",
        "--disable_tqdm", "true",
    ]  # fmt: skip
    assert main(argv) == 0
    robustness = [
        "eval", "robustness", "--models", str(model), "--dataset_name", str(path), "--streaming", "true",
        "--eval_size", "4", "--output_dir", str(tmp_path / "r"), "--gammas", "0", "1", "--seeds", "1",
        "--bootstrap_samples", "50",
    ]  # fmt: skip
    assert main(robustness) == 0  # the held-out rows of the stream, read the same way
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert "4 held-out rows" in json.dumps(results)
    data = json.loads((tmp_path / "o" / "data.json").read_text())
    assert data["streaming"] and data["held_out"].startswith("the first 4 rows of the stream")
    report = json.loads((tmp_path / "o" / "constraints.json").read_text())
    assert report["global_step"] == 2 and torch.tensor(list(report["dual"].values())).gt(0).any()


def test_the_studys_held_out_instructions_of_a_stream_skip_those_it_trains_on(tmp_path):
    """The study's answers come from the stream's first `eval_size` rows, less any instruction the training rows
    hold (found in one pass over the training stream)."""
    from constrained_sft.data import DataArguments
    from constrained_sft.data.instructions import held_out_instructions

    path = tmp_path / "alpaca.jsonl"
    rows = [{"instruction": f"say {i if i < 40 else i % 5}", "input": "", "output": f"ok {i}"} for i in range(60)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    used, counts = held_out_instructions(DataArguments(dataset_name=str(path), streaming=True, eval_size=6))
    assert [row["instruction"] for row in used] == ["say 5"]  # say 0..4 come back in rows 40..59
    assert counts == {"held_out_rows": 6, "in_training": 5, "repeated": 0, "no_exchange": 0, "used": 1}


def test_the_command_line_streams_classification_data(tmp_path):
    from constrained_sft.cli import main
    from constrained_sft.testing import tiny_encoder

    model = tmp_path / "clf"
    tiny_encoder("bert", num_labels=2).save_pretrained(model)
    tiny_tokenizer().save_pretrained(model)
    folder = tmp_path / "reviews"
    folder.mkdir()
    rows = [{"text": f"s{i % 24} s{(i + 3) % 24}", "label": ("neg", "pos")[i % 2]} for i in range(40)]
    Dataset.from_list(rows).to_csv(folder / "train.csv")
    argv = [
        "train", "--task", "classification", "--model_name_or_path", str(model), "--dataset_name", str(folder),
        "--streaming", "true", "--eval_size", "8", "--max_steps", "2", "--per_device_train_batch_size", "4",
        "--output_dir", str(tmp_path / "o"), "--use_cpu", "true", "--report_to", "none", "--save_strategy", "no",
        "--disable_tqdm", "true",
    ]  # fmt: skip
    assert main(argv) == 0
    report = json.loads((tmp_path / "o" / "constraints.json").read_text())
    assert report["global_step"] == 2
    rows[20]["label"] = "meh"  # a class the held-out rows do not have: refused when training reaches it
    Dataset.from_list(rows).to_csv(folder / "train.csv")
    argv[argv.index("--output_dir") + 1] = str(tmp_path / "o2")
    argv[argv.index("--max_steps") + 1] = "8"
    with pytest.raises(ValueError, match=r"train row 12 \(streamed\): label 'meh' is not one of \['neg', 'pos'\]"):
        main(argv)


def test_a_streamed_run_resumed_on_other_data_is_another_run_like_one_with_another_seed(tmp_path):
    """The run's identity holds what it trains on (the data fields and the local file's fingerprint): the same
    command on other data, or on the same path with other rows, is refused in its folder like another seed, before
    any work; the same data resumes. Missing `max_steps` with a stream is refused before the model loads."""
    from constrained_sft.cli import main
    from constrained_sft.trainers import OutputDirError

    model = tmp_path / "model"
    tiny_causal_lm("llama").save_pretrained(model)
    tiny_tokenizer().save_pretrained(model)
    rows = [{"prompt": f"s{i % 20} s{(i + 1) % 20} =", "completion": f" s{(i + 2) % 20}"} for i in range(24)]
    data, other = tmp_path / "data.jsonl", tmp_path / "other.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    other.write_text("".join(json.dumps(r) + "\n" for r in rows[::-1]))
    out = tmp_path / "o"
    argv = [
        "train", "--model_name_or_path", str(model), "--dataset_name", str(data), "--output_dir", str(out),
        "--streaming", "true", "--eval_size", "4", "--max_steps", "2", "--per_device_train_batch_size", "4",
        "--bf16", "false", "--use_cpu", "true", "--report_to", "none", "--save_strategy", "steps", "--save_steps", "1",
        "--disable_tqdm", "true",
    ]  # fmt: skip
    assert main(argv) == 0
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    for change, named in ((["--dataset_name", str(other)], "data.dataset_name"), (["--seed", "7"], "`seed`")):
        with pytest.raises(OutputDirError, match=f"another run.*{named}"):
            main([*argv, *change])
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:-1]))  # the same path, other rows
    with pytest.raises(OutputDirError, match="another run.*data.files"):
        main(argv)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == stamps  # nothing touched
    no_steps = [a for a in argv if a not in ("--max_steps", "2")] + ["--output_dir", str(tmp_path / "o2")]
    with pytest.raises(ValueError, match="`streaming` .* set `max_steps`"):
        main(no_steps)
    assert not (tmp_path / "o2").exists()
