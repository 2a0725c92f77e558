"""
Output folders that protect work: a run's identity in run.json, the same run resumed (naming checkpoint and step),
another run's folder refused unless resumed or overwritten, and a checkpoint that does not fit the run refused.
"""

import json
import logging
import os

import pytest

from constrained_sft import ConstrainedConfig, ConstrainedTrainer
from constrained_sft.testing import presence_dataset, tiny_encoder
from constrained_sft.trainers import CheckpointError, OutputDirError


def trainer(out, model=None, **kw):
    settings = dict(
        output_dir=str(out), report_to="none", use_cpu=True, per_device_train_batch_size=4, max_steps=2,
        save_strategy="steps", save_steps=1, learning_rate=1e-3, dual_lr=0.5,
    )  # fmt: skip
    args = ConstrainedConfig(**{**settings, **kw})
    return ConstrainedTrainer(model=model or tiny_encoder(), args=args, train_dataset=presence_dataset(16))


def steps(out):
    return sorted(int(n.split("-")[1]) for n in os.listdir(out) if n.startswith("checkpoint-"))


def test_the_same_run_resumes_its_own_folder_and_says_from_where(tmp_path, caplog):
    trainer(tmp_path / "run").train()
    assert json.loads((tmp_path / "run" / "run.json").read_text())["id"]
    again = trainer(tmp_path / "run")
    with caplog.at_level(logging.WARNING):
        again.train()
    assert f"Resuming from {tmp_path / 'run' / 'checkpoint-2'} (optimizer step 2)" in caplog.text
    assert again.state.global_step == 2  # nothing left to train


def test_a_setting_that_does_not_decide_the_weights_is_not_part_of_the_run(tmp_path):
    """`console_format` changes what is printed, not weights: a run continues under another value, and a folder whose
    run.json predates `host_allocator` being bookkeeping (it was in the identity, as 'reuse', before it left the
    training config for the command's process settings) is still the same run's."""
    trainer(tmp_path / "run", console_format="compact").train()
    assert trainer(tmp_path / "run", console_format="full").train().global_step == 2  # resumed: nothing left
    path = tmp_path / "run" / "run.json"
    saved = json.loads(path.read_text())
    saved["config"]["host_allocator"] = "reuse"  # how an earlier version wrote it
    saved["id"] = "0123456789abcdef"
    path.write_text(json.dumps(saved))
    assert trainer(tmp_path / "run").train().global_step == 2


def test_another_runs_folder_is_refused_naming_what_differs_and_the_flags(tmp_path):
    trainer(tmp_path / "run").train()
    before = {n: os.path.getmtime(tmp_path / "run" / n) for n in os.listdir(tmp_path / "run")}
    with pytest.raises(
        OutputDirError, match=r"holds 2 checkpoint\(s\) of another run \(it differs in `learning_rate`\)"
    ):
        trainer(tmp_path / "run", learning_rate=5e-3).train()
    assert {n: os.path.getmtime(tmp_path / "run" / n) for n in os.listdir(tmp_path / "run")} == before
    with pytest.raises(OutputDirError, match="--resume_from_checkpoint true.*--overwrite_output_dir true"):
        trainer(tmp_path / "run", learning_rate=5e-3).train()


def test_overwrite_removes_the_other_runs_checkpoints_before_training(tmp_path):
    trainer(tmp_path / "run", max_steps=3).train()
    assert steps(tmp_path / "run") == [1, 2, 3]
    trainer(tmp_path / "run", learning_rate=5e-3, save_strategy="no", overwrite_output_dir=True).train()
    assert steps(tmp_path / "run") == []  # no resume could pick up the other run's checkpoint-3


def test_an_explicit_resume_with_other_settings_continues_and_warns(tmp_path, caplog):
    trainer(tmp_path / "run").train()
    longer = trainer(tmp_path / "run", max_steps=3)
    with caplog.at_level(logging.WARNING):
        longer.train(resume_from_checkpoint=True)
    assert "differs in `max_steps`" in caplog.text and longer.state.global_step == 3


def test_starting_the_same_run_over_without_overwrite_is_refused(tmp_path):
    trainer(tmp_path / "run").train()
    with pytest.raises(
        OutputDirError, match="same run and `resume_from_checkpoint` is false.*--resume_from_checkpoint"
    ):
        trainer(tmp_path / "run").train(resume_from_checkpoint=False)


def test_a_checkpoint_of_another_model_size_is_refused_naming_its_config(tmp_path):
    trainer(tmp_path / "run").train()
    other = trainer(tmp_path / "other", model=tiny_encoder(layers=4, num_labels=3))
    with pytest.raises(
        CheckpointError, match=r"checkpoint-2/config.json is a model of another shape \(num_labels 2 vs 3"
    ):
        other.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))
    assert not (tmp_path / "other").exists()


def test_resuming_a_constrained_checkpoint_without_constraints_is_said(tmp_path, caplog):
    trainer(tmp_path / "run").train()
    erm = trainer(tmp_path / "erm", constraints="none", max_steps=3)
    with caplog.at_level(logging.WARNING):
        erm.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))
    assert "trained with `constraints: descent` as `constraints: none`" in caplog.text


def test_the_model_folder_itself_is_refused(tmp_path):
    tiny_encoder().save_pretrained(tmp_path / "model")
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "model")
    files = sorted(os.listdir(tmp_path / "model"))
    with pytest.raises(OutputDirError, match="is the folder of the model training starts from"):
        trainer(tmp_path / "model", model=model).train()
    assert sorted(os.listdir(tmp_path / "model")) == files


def test_a_data_field_the_run_no_longer_sets_is_a_named_change_not_a_crash():
    from constrained_sft.trainers.resume import RunIdentity

    saved = RunIdentity("a", None, {}, {"train_file": "x.jsonl", "files": {"train_file": "sha256:abc"}})
    now = RunIdentity("a", None, {}, {"dataset_name": "someone/data"})
    changes = ["data.dataset_name", "data.train_file", "data.files.train_file"]
    assert now.data_changes(saved) == changes  # a TypeError from os.stat(None) before
    assert not now.same_run(saved)


def test_fields_added_since_a_release_stay_out_of_the_identity_at_what_that_release_ran():
    """`noise_modality: both` (a text model's only noise before VLMs) and an unset `noise_image_sigma` leave a run's
    identity as the previous release wrote it; any other value is part of it."""
    from constrained_sft.trainers.resume import deciding

    earlier = {"learning_rate": 0.1, "noise_gamma": 0.5}
    assert deciding({**earlier, "noise_modality": "both", "noise_image_sigma": None}) == earlier
    assert deciding({**earlier, "noise_modality": "text"}) == {**earlier, "noise_modality": "text"}
    assert deciding({**earlier, "noise_image_sigma": 0.2}) == {**earlier, "noise_image_sigma": 0.2}
