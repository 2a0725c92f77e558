"""
Non-finite guards: a NaN objective or gradient stops training before the parameters move (or skips the step, on
request), and a checkpoint whose multipliers are NaN or negative is refused naming the file.
"""

import math
import os

import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file, save_file

from constrained_sft import ConstrainedConfig, ConstrainedTrainer
from constrained_sft.testing import tiny_encoder
from constrained_sft.trainers import CheckpointError, NonFiniteStepError
from constrained_sft.trainers.resume.files import STATE_TENSORS, ConstraintStateError


def regression_rows(n=16, bad_row=3):
    """Rows as a plain list (a torch-style dataset), which the label check does not read: the NaN reaches the step."""
    rows = [{"input_ids": [2, 11 + i % 5, 12], "attention_mask": [1, 1, 1], "labels": float(i % 3)} for i in range(n)]
    rows[bad_row]["labels"] = math.nan
    return rows


def test_nan_regression_labels_in_a_dataset_are_refused_before_training(tmp_path):
    args = ConstrainedConfig(output_dir=str(tmp_path / "out"), report_to="none", use_cpu=True)
    with pytest.raises(ValueError, match=r"`train_dataset` row 3: `labels` \[nan\].*finite numbers"):
        ConstrainedTrainer(
            model=tiny_encoder(num_labels=1), args=args, train_dataset=Dataset.from_list(regression_rows())
        )
    with pytest.raises(ValueError, match=r"`eval_dataset` row 0: `labels` \[7.0\].*class ids 0..1"):
        rows = [{"input_ids": [2, 11], "attention_mask": [1, 1], "labels": 7}]
        ConstrainedTrainer(model=tiny_encoder(), args=args, eval_dataset=Dataset.from_list(rows))
    assert not (tmp_path / "out").exists()


def regression_trainer(tmp_path, **kw):
    args = ConstrainedConfig(
        output_dir=str(tmp_path / "out"), report_to="none", use_cpu=True, per_device_train_batch_size=4,
        max_steps=3, logging_steps=1, save_strategy="no", learning_rate=1e-2, **kw,
    )  # fmt: skip
    return ConstrainedTrainer(model=tiny_encoder(num_labels=1), args=args, train_dataset=regression_rows())


def parameters(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_nan_regression_labels_stop_training_before_any_parameter_moves(tmp_path):
    trainer = regression_trainer(tmp_path)
    before = parameters(trainer.model)
    with pytest.raises(NonFiniteStepError, match=r"optimizer step 1: the gradient norm is nan.*nonfinite_steps: skip"):
        trainer.train()
    after = parameters(trainer.model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not os.path.exists(tmp_path / "out" / "model.safetensors")


def test_skip_policy_drops_the_nonfinite_step_and_counts_it(tmp_path):
    trainer = regression_trainer(tmp_path, nonfinite_steps="skip")
    trainer.train()
    assert all(bool(torch.isfinite(v).all()) for v in trainer.model.state_dict().values())
    assert trainer.primal_dual.nonfinite_steps == 1  # the first batch of 4 holds the NaN row
    assert trainer.write_constraint_report().nonfinite_steps_skipped == 1


@pytest.fixture
def checkpoint(tmp_path):
    """A complete checkpoint of a 3-step classifier run (save every step)."""
    from constrained_sft.testing import presence_dataset

    args = ConstrainedConfig(
        output_dir=str(tmp_path / "run"), report_to="none", use_cpu=True, per_device_train_batch_size=4,
        max_steps=2, save_strategy="steps", save_steps=1, dual_lr=0.5,
    )  # fmt: skip
    ConstrainedTrainer(model=tiny_encoder(), args=args, train_dataset=presence_dataset(16)).train()
    return tmp_path / "run" / "checkpoint-2"


@pytest.mark.parametrize(("value", "why"), [(math.nan, "non-finite"), (-1.0, "must be >= 0")])
def test_a_checkpoint_with_nan_or_negative_multipliers_is_refused_naming_the_file(checkpoint, value, why):
    path = checkpoint / STATE_TENSORS
    tensors = load_file(path)
    tensors["multipliers"][0] = value
    save_file(tensors, path)
    from constrained_sft.trainers.resume.files import read_state

    with pytest.raises(ConstraintStateError, match=rf"{STATE_TENSORS}.*{why}"):
        read_state(str(checkpoint))
    args = ConstrainedConfig(
        output_dir=str(checkpoint.parent), report_to="none", use_cpu=True, per_device_train_batch_size=4, max_steps=3
    )
    from constrained_sft.testing import presence_dataset

    trainer = ConstrainedTrainer(model=tiny_encoder(), args=args, train_dataset=presence_dataset(16))
    with pytest.raises(CheckpointError, match=rf"{STATE_TENSORS}.*{why}"):
        trainer.train(resume_from_checkpoint=str(checkpoint))
