"""Embedding noise wired into ConstrainedSFTTrainer: training levels, per-level evaluation, the ERM baseline."""

import json

import pytest
import torch

from constrained_sft.testing import successor_dataset


def _spy_forward(trainer):
    """Records, for every model call, its kwargs and the per-row std of the embedding output."""
    model = trainer.model
    calls = []
    model.register_forward_pre_hook(lambda m, a, k: calls.append(sorted(k)), with_kwargs=True)
    return calls


def test_training_noise_is_applied_per_example_and_never_reaches_forward(make_trainer):
    clean = make_trainer(max_steps=3, dual_lr=0.5)
    clean.train()
    noisy = make_trainer(
        max_steps=3, dual_lr=0.5, noise_gamma=[0.5, 2.0], output_dir=str(clean.args.output_dir) + "-n"
    )
    calls = _spy_forward(noisy)
    levels = []
    original = noisy.noise.training_levels

    def spy(inputs, training):
        gamma = original(inputs, training)
        levels.append(gamma.clone())
        return gamma

    noisy.noise.training_levels = spy
    noisy.train()
    assert calls and all("noise_gamma" not in kwargs for kwargs in calls)
    assert len(levels) == 3 and all(g.shape == (4,) for g in levels)
    assert (
        all(0.5 <= v <= 2.0 for g in levels for v in g.tolist())
        and len({round(v, 6) for g in levels for v in g.tolist()}) > 4
    )
    a = [r["loss"] for r in clean.state.log_history if "loss" in r]
    b = [r["loss"] for r in noisy.state.log_history if "loss" in r]
    assert a[0] != b[0]  # the very first step already sees perturbed embeddings


def test_evaluate_reports_every_noise_level_reproducibly(make_trainer):
    trainer = make_trainer(max_steps=1, eval_noise_gammas=[0.0, 1.0, 3.0], eval_dataset=successor_dataset(16, seed=1))
    first = trainer.evaluate()
    for level in ("0", "1", "3"):
        for key in ("loss", "mean_token_accuracy", "layer_loss/4", "descent_fraction"):
            assert f"eval_gamma_{level}_{key}" in first, f"eval_gamma_{level}_{key}"
    assert "eval_loss" in first and "eval_mean_token_accuracy" in first
    assert first["eval_gamma_0_loss"] == first["eval_loss"]  # gamma 0 is exactly the clean model
    assert first["eval_gamma_3_loss"] != first["eval_loss"]
    second = trainer.evaluate()
    assert second["eval_gamma_3_loss"] == first["eval_gamma_3_loss"]  # seeded per level
    # TRL's own eval metrics stay under their level, not overwritten as eval_*
    assert first["eval_mean_token_accuracy"] == second["eval_mean_token_accuracy"]


def test_erm_baseline_trains_on_the_same_perturbations(make_trainer):
    trainer = make_trainer(
        max_steps=2,
        constraints="none",
        noise_gamma=1.5,
        noise_clean_prob=0.5,
        eval_noise_gammas=[1.5],
        eval_dataset=successor_dataset(8, seed=1),
        eval_strategy="steps",
        eval_steps=2,
    )
    trainer.train()
    row = next(r for r in trainer.state.log_history if "eval_gamma_1.5_loss" in r)
    assert torch.isfinite(torch.tensor(row["eval_gamma_1.5_loss"]))


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"noise_gamma": -1.0}, r"noise_gamma.*>= 0"),
        ({"noise_gamma": [2.0, 1.0]}, "gamma_min <= gamma_max"),
        ({"noise_gamma": [0.1, 0.2, 0.3]}, "noise_gamma.*range"),
        ({"noise_clean_prob": 1.5}, r"noise_clean_prob.*\[0, 1\]"),
        ({"eval_noise_gammas": [0.5, -1.0]}, r"eval_noise_gammas.*>= 0"),
    ],
)
def test_noise_config_errors(kwargs, pattern):
    from conftest import config_kwargs

    from constrained_sft import ConstrainedSFTConfig

    with pytest.raises(ValueError, match=pattern):
        ConstrainedSFTConfig(**config_kwargs("/tmp/unused"), **kwargs)


def test_one_noise_scale_for_the_whole_run_measured_once(tmp_path, monkeypatch):
    """sigma_x is the starting model's, measured once (not per micro-batch), used by training and evaluate() after
    training has moved the embeddings, and recorded in constraints.json."""
    from conftest import config_kwargs

    from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer, embedding_sigma
    from constrained_sft.noise import embedding as noise_module
    from constrained_sft.testing import tiny_causal_lm, tiny_tokenizer
    from constrained_sft.trainers import noise as trainer_noise

    model = tiny_causal_lm("llama")
    start = embedding_sigma(model)
    measured = []
    original_std = noise_module.table_std
    monkeypatch.setattr(noise_module, "table_std", lambda w: measured.append(1) or original_std(w))
    used = []
    original_noise = trainer_noise.noisy  # every noisy forward of the trainer goes through it
    monkeypatch.setattr(trainer_noise, "noisy", lambda *a, **kw: used.append(kw["sigma"]) or original_noise(*a, **kw))
    args = ConstrainedSFTConfig(
        **config_kwargs(tmp_path, max_steps=4, learning_rate=0.05, noise_gamma=1.0, eval_noise_gammas=[1.0])
    )
    trainer = ConstrainedSFTTrainer(
        model=model, args=args, train_dataset=successor_dataset(32), eval_dataset=successor_dataset(8, seed=1),
        processing_class=tiny_tokenizer(),
    )  # fmt: skip
    trainer.train()
    trainer.evaluate()
    assert len(measured) == 1  # once, when the trainer was built: never per micro-batch
    assert embedding_sigma(model) != pytest.approx(start, rel=1e-3)  # training moved the embeddings
    assert len(used) >= 5 and set(used) == {start}  # 4 training micro-batches and the noisy evaluation
    report = json.loads((tmp_path / "constraints.json").read_text())
    assert report["noise_sigma_x"] == start


def test_one_training_level_per_packed_document(make_trainer):
    """A padding-free row of 3 documents gets 3 levels (not 1 level for the row, nor the last level repeated)."""
    trainer = make_trainer(noise_gamma=[0.5, 2.0])
    trainer.model.train()
    inputs = {
        "input_ids": torch.ones(1, 9, dtype=torch.long),
        "position_ids": torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]]),
    }
    levels = trainer.noise.training_levels(inputs, trainer.model.training)
    assert levels.shape == (3,) and len(set(levels.tolist())) == 3 and all(0.5 <= v <= 2.0 for v in levels.tolist())
    assert trainer.noise.training_levels({"input_ids": torch.ones(4, 5, dtype=torch.long)}, True).shape == (4,)
    trainer.model.eval()
    assert trainer.noise.training_levels(inputs, trainer.model.training) is None  # evaluation draws no training noise
