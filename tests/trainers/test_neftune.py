"""NEFTune (`neftune_noise_alpha`, transformers' uniform embedding noise in training) with both trainers: it trains,
alone or with `noise_gamma` (the two perturbations add up: NEFTune's, then the Gaussian), leaves no hook behind, and a
run resumes bit-exact."""

import pytest
import torch
from conftest import full_and_resumed


def _weights(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()]


def _neftune_on(trainer) -> bool:
    from transformers.integrations.neftune import neftune_post_forward_hook

    embeddings = trainer.model.get_input_embeddings()
    return neftune_post_forward_hook in embeddings._forward_hooks.values() or hasattr(
        embeddings, "neftune_noise_alpha"
    )


@pytest.mark.parametrize("gamma", [0.0, 0.5])
def test_neftune_trains_the_sft_trainer_and_goes_away(make_trainer, tmp_path, gamma):
    plain = make_trainer(constraints="none", noise_gamma=gamma, max_steps=2, output_dir=str(tmp_path / "plain"))
    plain.train()
    neft = make_trainer(constraints="none", noise_gamma=gamma, max_steps=2, neftune_noise_alpha=5.0,
                        output_dir=str(tmp_path / "neft"))  # fmt: skip
    neft.train()
    assert not _neftune_on(neft)  # transformers removes its hook when training ends: evaluation runs clean
    assert any(not torch.equal(a, b) for a, b in zip(_weights(plain), _weights(neft), strict=True))
    first = [r["loss"] for r in neft.state.log_history if "loss" in r][0]
    assert first != [r["loss"] for r in plain.state.log_history if "loss" in r][0]  # the first forward is perturbed


def test_neftune_trains_the_readout_trainer(tmp_path):
    from test_classifier import make as make_classifier

    plain = make_classifier(tmp_path / "a", max_steps=2)
    plain.train()
    neft = make_classifier(tmp_path / "b", max_steps=2, neftune_noise_alpha=5.0)
    neft.train()
    assert any(not torch.equal(a, b) for a, b in zip(_weights(plain), _weights(neft), strict=True))


def test_a_neftune_run_resumes_bit_exact(make_trainer, tmp_path):
    """NEFTune draws from torch's global RNG, which a checkpoint saves and a resume restores."""
    kw = dict(constraints="descent", neftune_noise_alpha=5.0, max_steps=4, save_strategy="steps", save_steps=2,
              layer_loss_tokens=2)  # fmt: skip
    full, resumed = full_and_resumed(make_trainer, tmp_path, 2, **kw)
    assert all(torch.equal(a, b) for a, b in zip(_weights(full), _weights(resumed), strict=True))
