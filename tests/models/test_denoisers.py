"""The video denoisers (DUST, video UT, ViT): shapes, save / load, the readout contract, DCT start, a few constrained
steps, on tiny configs."""

import numpy as np
import pytest
import scipy.fft
import torch
from transformers import AutoModel, ViTConfig, ViTModel

from constrained_sft import ConstrainedConfig, ConstrainedTrainer
from constrained_sft.models import (
    DUSTConfig,
    DUSTForDenoising,
    VideoUTConfig,
    VideoUTForDenoising,
    ViTDenoiserConfig,
    ViTForDenoising,
    dct_dictionary,
)
from constrained_sft.models.dust import soft_threshold
from constrained_sft.noise import embedding_noise


def tiny(kind: str):
    """A tiny denoiser of 8 x 8 patches and its input `[B, T, 64]` (ViT: the 4 patches of a 16 x 16 frame)."""
    torch.manual_seed(0)
    if kind == "dust":
        return DUSTForDenoising(
            DUSTConfig(patch_size=8, dictionary_atoms_per_side=10, num_hidden_layers=3, data_std=0.2)
        )
    if kind == "ut":
        return VideoUTForDenoising(
            VideoUTConfig(patch_size=8, dictionary_atoms_per_side=8, num_hidden_layers=2, data_std=0.2)
        )
    config = ViTDenoiserConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                               image_size=16, patch_size=8, num_channels=1, frame_size=16, data_std=0.2)  # fmt: skip
    return ViTForDenoising(config)


KINDS = ["dust", "ut", "vit"]


def _input(kind: str, batch: int = 3) -> torch.Tensor:
    return torch.rand(batch, 4 if kind == "vit" else 5, 64)


@pytest.mark.parametrize("kind", KINDS)
def test_shapes_readout_contract_and_save_load(kind, tmp_path):
    model = tiny(kind).eval()
    x = _input(kind)
    out = model(input_values=x, labels=x, output_hidden_states=True)
    assert out.logits.shape == x.shape
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    assert torch.equal(model.readout(out.hidden_states[-1]), out.logits)  # psi(h_L) is the model's output
    assert torch.allclose(out.loss, ((out.logits - x) ** 2).mean())
    assert model.config.problem_type == "regression"
    model.save_pretrained(tmp_path)
    again = AutoModel.from_pretrained(tmp_path).eval()
    assert type(again) is type(model) and again.config.data_std == 0.2
    assert torch.equal(again(input_values=x).logits, out.logits)
    with pytest.raises(ValueError, match="input_values"):
        model(input_values=torch.rand(2, 3, 10))


def test_dct_dictionary_matches_scipy_and_is_unit_norm():
    reference = scipy.fft.dct(np.eye(8), norm="ortho", axis=0).T  # columns: orthonormal DCT-II atoms
    assert np.allclose(dct_dictionary(8, 8).numpy(), np.kron(reference, reference), atol=1e-6)
    over = dct_dictionary(8, 12)
    assert over.shape == (64, 144) and torch.allclose(over.norm(dim=0), torch.ones(144), atol=1e-5)
    with pytest.raises(ValueError, match="dictionary_atoms_per_side"):
        dct_dictionary(8, 4)


def test_dust_layers_follow_the_equations_and_train_only_dictionaries():
    model = tiny("dust").eval()
    assert [n for n, p in model.named_parameters() if p.requires_grad] == [f"dictionaries.{i}" for i in range(3)]
    assert all(torch.equal(d, dct_dictionary(8, 10)) for d in model.dictionaries)
    x = _input("dust")
    states = model(input_values=x, output_hidden_states=True).hidden_states
    D, c, cfg = model.dictionaries[0], model.lipschitz, model.config
    assert torch.allclose(c, torch.linalg.matrix_norm(D, ord=2) ** 2)
    h1 = soft_threshold(x @ D / c, cfg.sparsity_weight / c)  # H_0 = 0: the first ISTA step
    assert torch.equal(states[0], x) and torch.allclose(states[1], h1 @ D.T, atol=1e-6)
    a = (h1 @ h1.transpose(1, 2) / cfg.num_atoms**0.5).softmax(-1)
    m = (1 - cfg.attention_weight) * h1 + cfg.attention_weight * a @ h1
    h2 = soft_threshold(m @ (torch.eye(cfg.num_atoms) - D.T @ D / c) + x @ D / c, cfg.sparsity_weight / c)
    assert torch.allclose(states[2], h2 @ D.T, atol=1e-5)
    tied = DUSTForDenoising(DUSTConfig(patch_size=8, dictionary_atoms_per_side=10, tie_dictionaries=True))
    assert len(tied.dictionaries) == 1
    with pytest.raises(ValueError, match="attention_weight"):
        DUSTConfig(attention_weight=1.5)


def test_a_vit_denoiser_takes_square_patches_only():
    with pytest.raises(ValueError, match=r"`patch_size` must be one integer \(square patches\), got \[8, 8\]"):
        ViTDenoiserConfig(patch_size=[8, 8], frame_size=16)  # a TypeError in `%` before


def test_video_ut_starts_as_the_identity_with_attention_tied():
    model = tiny("ut").eval()
    x = _input("ut")
    states = model(input_values=x, output_hidden_states=True).hidden_states
    for h in states:  # DCT analysis, positive / negative parts, identity layers: every readout returns the input
        assert torch.allclose(model.readout(h), x, atol=1e-5)
    assert sum(1 for n, _ in model.named_parameters() if n.startswith("attention.")) == 3  # one Q, K, V


def test_vit_from_pretrained_copies_weights_and_interpolates(tmp_path):
    vit = ViTModel(ViTConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                             image_size=8, patch_size=8, num_channels=3), add_pooling_layer=False)  # fmt: skip
    vit.save_pretrained(tmp_path)
    model = ViTForDenoising.from_pretrained_vit(str(tmp_path), frame_size=16, data_std=0.2).eval()
    assert torch.equal(
        model.vit.embeddings.patch_embeddings.projection.weight, vit.embeddings.patch_embeddings.projection.weight
    )
    x = _input("vit")  # a 16 x 16 frame: 4 patches where the pretrained ViT had 1 (position embeddings interpolated)
    assert model(input_values=x).logits.shape == x.shape


@pytest.mark.parametrize("kind", KINDS)
def test_noise_perturbs_the_pixels_at_the_data_scale(kind):
    model = tiny(kind).eval()
    x = _input(kind, 64)
    seen = []
    with embedding_noise(model, gamma=0.5, seed=0):  # a hook registered after the noise's sees the noisy pixels
        model.get_input_embeddings().register_forward_hook(lambda _m, _a, out: seen.append(out))
        model(input_values=x)
    assert abs(float((seen[-1] - x).std()) - 0.5 * 0.2) < 0.01


@pytest.mark.parametrize("kind", KINDS)
def test_a_few_constrained_steps(kind, tmp_path):
    data = [{"input_values": v, "labels": v} for v in _input(kind, 32)]
    args = ConstrainedConfig(output_dir=str(tmp_path), max_steps=6, per_device_train_batch_size=8, learning_rate=1e-3,
                             use_cpu=True, report_to="none", save_strategy="no", constraints="descent",
                             descent_epsilon=1e-4, dual_optimizer="adam", dual_lr=0.1, noise_gamma=0.5,
                             logging_steps=3, disable_tqdm=True)  # fmt: skip
    model = tiny(kind)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = ConstrainedTrainer(model=model, args=args, train_dataset=data, loss="squared_error")
    trainer.train()
    assert trainer.noise_sigma == 0.2  # the data's sigma_x, from the model's pixel input
    assert trainer.primal_dual.multipliers.value().gt(0).any()
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_the_registry_builds_each_denoiser_from_its_recipe_fields():
    """`DENOISERS` owns the names: each entry's fields are recipe fields, its builder gives its class (the recipe's
    sigma_x in the config), and `denoiser_of` finds the entry again from the model."""
    import dataclasses

    from constrained_sft.models import DENOISERS, denoiser_of
    from constrained_sft.tasks import VideoScriptArguments

    recipe_fields = {f.name for f in dataclasses.fields(VideoScriptArguments)}
    assert set(DENOISERS) == {"dust", "ut", "vit"}
    for name, entry in DENOISERS.items():
        assert set(entry.fields) <= recipe_fields, name
        recipe = VideoScriptArguments(
            architecture=name, patch_size=8, frame_size=16, num_layers=2, dictionary_atoms_per_side=8,
            vit_hidden_size=64, vit_intermediate_size=32,
        )  # fmt: skip
        model = entry.build(recipe, 0.25)
        assert isinstance(model, entry.model_class) and model.config.data_std == 0.25
        assert denoiser_of(model) is entry and recipe.sequence_axis == entry.sequence_axis
    with pytest.raises(ValueError, match="not a registered video denoiser"):
        denoiser_of(torch.nn.Linear(1, 1))
