"""Damaged checkpoints: what a kill, a bad copy or another version leaves is skipped or refused naming the file."""

import json
import logging

import pytest
import torch
from safetensors.torch import save_file

from constrained_sft.constraints import AdamDual, DescentConstraints, LayerLosses, PrimalDual
from constrained_sft.trainers.resume.files import (
    MARKER,
    STATE_JSON,
    STATE_TENSORS,
    ConstraintStateError,
    load_state,
    mark_complete,
    save_state,
)
from constrained_sft.trainers.resume.select import CheckpointError, resolve_resume

SPEC = DescentConstraints(layers=(1, 2, 3), alphas=(0.1, 0.1), epsilon=None)


def primal_dual(spec=SPEC):
    pd = PrimalDual(spec, dual_optimizer=AdamDual, dual_lr=0.1)
    losses = LayerLosses(torch.tensor([3.0, 2.9, 2.0]) * 10, torch.zeros(3, 1), torch.tensor([10]), torch.tensor(10))
    pd.train_stats.add(losses)
    pd.step(0, lambda t: t)
    return pd


def checkpoint(run, step, complete=True):
    folder = run / f"checkpoint-{step}"
    save_state(primal_dual(), str(folder))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    save_file({"weight": torch.zeros(2)}, str(folder / "model.safetensors"))
    if complete:
        mark_complete(str(folder), step)
    return folder


def truncate(path):
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def newer(path):
    meta = json.loads(path.read_text())
    path.write_text(json.dumps({**meta, "format_version": 99}))


DAMAGE = {
    "truncated json": (lambda f: truncate(f / STATE_JSON), STATE_JSON, "truncated or not JSON"),
    "truncated tensors": (lambda f: truncate(f / STATE_TENSORS), STATE_TENSORS, "truncated or damaged"),
    "missing json": (lambda f: (f / STATE_JSON).unlink(), STATE_JSON, "missing"),
    "missing tensors": (lambda f: (f / STATE_TENSORS).unlink(), STATE_TENSORS, "missing"),
    "newer format": (lambda f: newer(f / STATE_JSON), STATE_JSON, "format_version 99, written by a newer"),
    "not a state": (lambda f: (f / STATE_JSON).write_text("[1, 2]"), STATE_JSON, "not a constraint state"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_constraint_state_is_refused_naming_the_file(tmp_path, damage):
    spoil, name, what = DAMAGE[damage]
    folder = checkpoint(tmp_path, 4)
    spoil(folder)
    with pytest.raises(ConstraintStateError, match=what) as error:
        load_state(primal_dual(), str(folder))
    assert str(folder / name) in str(error.value)
    with pytest.raises(CheckpointError, match=f"{what}|{name} is .* bytes but was saved as") as error:
        resolve_resume(str(folder), str(tmp_path))  # named explicitly: refused, with the way out
    assert str(folder) in str(error.value)


def test_another_constraint_layout_is_refused_naming_the_file(tmp_path):
    folder = checkpoint(tmp_path, 2)
    other = primal_dual(DescentConstraints(layers=(1, 3), alphas=(0.1,), epsilon=None))
    with pytest.raises(ConstraintStateError, match="constrained_layers") as error:
        load_state(other, str(folder))
    assert str(folder / STATE_JSON) in str(error.value)


def test_resume_true_takes_the_newest_complete_checkpoint_and_names_the_rest(tmp_path, caplog):
    checkpoint(tmp_path, 2)
    checkpoint(tmp_path, 4)
    truncate(checkpoint(tmp_path, 6) / STATE_TENSORS)  # complete, then damaged (a bad copy)
    checkpoint(tmp_path, 8, complete=False)  # the kill landed in this save
    with caplog.at_level(logging.WARNING):
        assert resolve_resume(True, str(tmp_path)) == str(tmp_path / "checkpoint-4")
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 2 and all(n.endswith(f"resuming from {tmp_path / 'checkpoint-4'}.") for n in notes)
    assert notes[0].startswith(f"Skipped {tmp_path / 'checkpoint-8'} (incomplete, no {MARKER}")
    assert notes[1].startswith(f"Skipped {tmp_path / 'checkpoint-6'} ({tmp_path / 'checkpoint-6' / STATE_TENSORS}")
    assert resolve_resume("True", str(tmp_path)) == str(tmp_path / "checkpoint-4")  # as a command line gives it
    assert resolve_resume("false", str(tmp_path)) is None
    with pytest.raises(CheckpointError, match="The newest complete checkpoint there is .*checkpoint-4"):
        resolve_resume(str(tmp_path / "checkpoint-8"), str(tmp_path))


def test_nothing_to_resume(tmp_path, caplog):
    with pytest.raises(CheckpointError, match="no checkpoint-<step> folder in output_dir"):
        resolve_resume(True, str(tmp_path))
    checkpoint(tmp_path, 2, complete=False)  # killed inside the first save: nothing was saved, start from step 0
    with caplog.at_level(logging.WARNING):
        assert resolve_resume(True, str(tmp_path)) is None
    assert "resuming from step 0, no checkpoint is complete" in caplog.text
    newer(checkpoint(tmp_path, 4) / STATE_JSON)  # a newer version's run is never restarted from scratch
    with pytest.raises(CheckpointError, match="can be resumed .*newer constrained-sft"):
        resolve_resume(True, str(tmp_path))
    with pytest.raises(CheckpointError, match="is not a directory"):
        resolve_resume(str(tmp_path / "checkpoint-9"), str(tmp_path))


def test_resume_true_skips_a_checkpoint_whose_weights_file_was_damaged_after_saving(tmp_path, caplog):
    checkpoint(tmp_path, 2)
    truncate(checkpoint(tmp_path, 4) / "model.safetensors")
    with caplog.at_level(logging.WARNING):
        assert resolve_resume(True, str(tmp_path)) == str(tmp_path / "checkpoint-2")
    assert "model.safetensors is" in caplog.text and "truncated or replaced" in caplog.text


def test_saving_rotates_after_the_marker_without_changing_the_runs_arguments(make_trainer, monkeypatch):
    """Rotation is held back while a checkpoint is written (transformers would rotate inside the save) on a copy of the
    arguments the save reads: the run's own `save_total_limit` is never changed, and the limit still applies."""
    import os

    import transformers

    seen = []
    original = transformers.Trainer._save_checkpoint

    def spy(self, model, trial):
        seen.append((self.args.save_total_limit, self._user_args.save_total_limit))
        return original(self, model, trial)

    monkeypatch.setattr(transformers.Trainer, "_save_checkpoint", spy)
    trainer = make_trainer(max_steps=3, save_strategy="steps", save_steps=1, save_total_limit=1)
    trainer._user_args = trainer.args
    trainer.train()
    assert seen == [(None, 1)] * 3  # inside transformers' save: the copy's limit is None, the run's is 1
    assert trainer.args is trainer._user_args and trainer.args.save_total_limit == 1
    assert sorted(d for d in os.listdir(trainer.args.output_dir) if d.startswith("checkpoint-")) == ["checkpoint-3"]
