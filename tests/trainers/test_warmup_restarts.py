"""The paper's primal warm-up (`constraint_warmup_epochs`) and resilience restarts (`resilience_restarts`) in a
training run of a tiny DUST: when the constraints switch on, when the relaxations reset, and a bit-exact resume."""

import torch
from transformers import TrainerCallback

from constrained_sft import ConstrainedConfig, ConstrainedTrainer
from constrained_sft.models import DUSTConfig, DUSTForDenoising

STEPS_PER_EPOCH = 4  # 32 examples, batches of 8


def _run(tmp_path, name, epochs=3, **kw):
    torch.manual_seed(0)
    data = [{"input_values": v, "labels": v} for v in torch.rand(32, 4, 64)]
    model = DUSTForDenoising(DUSTConfig(patch_size=8, dictionary_atoms_per_side=10, data_std=0.2))
    args = ConstrainedConfig(output_dir=str(tmp_path / name), num_train_epochs=epochs, per_device_train_batch_size=8,
                             learning_rate=1e-3, use_cpu=True, report_to="none", constraints="descent",
                             descent_epsilon=1e-4, dual_optimizer="sgd", dual_lr=0.05, resilience=0.1,
                             resilience_restarts=True, constraint_warmup_epochs=1, noise_gamma=0.5, logging_steps=4,
                             disable_tqdm=True, seed=3, **kw)  # fmt: skip
    return ConstrainedTrainer(model=model, args=args, train_dataset=data, loss="squared_error")


class Record(TrainerCallback):
    """After each optimizer step: (step, multipliers, relaxation); at each epoch start: the relaxation."""

    def __init__(self, trainer):
        self.trainer, self.steps, self.epoch_starts = trainer, [], []

    def on_step_end(self, args, state, control, **kwargs):
        dual = self.trainer.primal_dual.dual
        self.steps.append((state.global_step, dual.multipliers.value().clone(), dual.relaxation.clone()))

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.epoch_starts.append(self.trainer.primal_dual.dual.relaxation.clone())


def test_warmup_epoch_then_relaxations_reset_every_epoch(tmp_path):
    trainer = _run(tmp_path, "run", save_strategy="no")
    record = Record(trainer)
    trainer.add_callback(record)
    trainer.train()
    assert trainer.primal_dual.warmup_steps == STEPS_PER_EPOCH
    for step, lam, _u in record.steps[:STEPS_PER_EPOCH]:  # the primal warm-up: no dual step
        assert lam.eq(0).all(), step
    assert record.steps[STEPS_PER_EPOCH][1].gt(0).any()  # constraints on from the first step of epoch 2
    # the relaxation grew during epoch 2 and was zero again when epoch 3 started
    assert record.steps[2 * STEPS_PER_EPOCH - 1][2].gt(0).any()
    assert record.epoch_starts[2].eq(0).all()
    assert trainer.primal_dual.summary().relaxation  # the report uses the explicit relaxation


def test_resume_inside_an_epoch_with_restarts_is_bit_exact(tmp_path):
    full = _run(tmp_path, "full", save_strategy="steps", save_steps=10)  # step 10: inside epoch 3
    full.train()
    resumed = _run(tmp_path, "full", save_strategy="no")
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-10"))
    assert resumed.state.global_step == 12
    a, b = full.primal_dual.dual, resumed.primal_dual.dual
    assert torch.equal(a.multipliers.weight, b.multipliers.weight) and torch.equal(a.relaxation, b.relaxation)
    for (n, p), q in zip(full.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q), n
