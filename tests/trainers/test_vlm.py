"""Vision-language models trained with images through the Python API: LLaVA, Gemma 3, Qwen2.5-VL and Idefics3, built
tiny offline with their own processor classes (`constrained_sft.testing.vlm`). Under `constraints="none"` the trainer
is TRL's `SFTTrainer` bit for bit; the noise reaches the image features exactly when asked; the layers' losses leave
the image placeholders out."""

import json

import pytest
import torch
import torch.nn.functional as F
from trl import SFTConfig, SFTTrainer
from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
from constrained_sft.noise import EmbeddingNoiseError, embedding_noise, noise_stream, noisy
from constrained_sft.noise.modality import image_feature_sigma, placeholder_ids
from constrained_sft.testing import tiny_causal_lm
from constrained_sft.testing.vlm import VLM_ARCHS, image_dataset, image_rows, tiny_vlm_pair


def settings(tmp_path, **extra):
    return dict(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=4,
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        max_length=None,
        seed=0,
        **extra,
    )


@pytest.mark.parametrize("arch", VLM_ARCHS)
def test_constraints_none_trains_exactly_like_trl_on_images(tmp_path, arch):
    data = image_dataset(8)
    model, processor = tiny_vlm_pair(arch)
    trl = SFTTrainer(model, SFTConfig(**settings(tmp_path / "trl")), train_dataset=data, processing_class=processor)
    theirs = trl.train().training_loss
    model, processor = tiny_vlm_pair(arch)
    args = ConstrainedSFTConfig(**settings(tmp_path / "ours", constraints="none"))
    ours = ConstrainedSFTTrainer(model, args, train_dataset=data, processing_class=processor)
    assert ours.train().training_loss == theirs
    trained = dict(trl.model.named_parameters())
    assert all(torch.equal(p, trained[name]) for name, p in ours.model.named_parameters())


def decoder_inputs(model, batch, **noise):
    """The `inputs_embeds` the language model receives for `batch`, clean or inside `noisy(model, **noise)`."""
    seen = {}

    def catch(_module, _args, kwargs):
        seen["embeds"] = kwargs["inputs_embeds"].detach().clone()

    with torch.no_grad():
        if not noise:
            handle = model.get_decoder().register_forward_pre_hook(catch, with_kwargs=True)
            model(**batch)
        else:
            with noisy(model, generator=noise_stream(model, 0), **noise):
                handle = model.get_decoder().register_forward_pre_hook(catch, with_kwargs=True)  # after the noise's
                model(**batch)
    handle.remove()
    return seen["embeds"]


@pytest.mark.parametrize("arch", VLM_ARCHS)
def test_the_noise_reaches_the_positions_asked(arch):
    model, processor = tiny_vlm_pair(arch)
    model.eval()
    batch = DataCollatorForVisionLanguageModeling(processor)(image_rows(2))
    images = torch.isin(batch["input_ids"], torch.tensor(placeholder_ids(model)))
    text = batch["attention_mask"].bool() & ~images
    assert images.sum() >= 4 and text.sum() >= 8
    clean = decoder_inputs(model, batch)
    for modality, expected in (("text", text), ("image", images), ("both", text | images)):
        changed = (decoder_inputs(model, batch, gamma=0.5, modality=modality) - clean).abs().amax(-1) > 0
        assert torch.equal(changed, expected), modality
    assert torch.equal(decoder_inputs(model, batch, gamma=0.0, modality="both"), clean)  # gamma 0: bit for bit
    # the image scale: the std of the features at the image positions, as the trainers measure it
    assert image_feature_sigma(model, batch) == pytest.approx(clean[images].float().std(unbiased=False).item())


def test_generation_with_an_image_under_image_noise():
    """`embedding_noise` around `generate()`: the prompt's image positions are perturbed (the first step's scores
    move), the new tokens are text; gamma 0 decodes bit for bit as without the block."""
    model, processor = tiny_vlm_pair("llava")
    model.eval()
    rows = image_rows(1)
    prompt = processor.apply_chat_template(rows[0]["messages"][:1], add_generation_prompt=True)
    inputs = processor(images=rows[0]["images"], text=prompt, return_tensors="pt")

    def scores(**noise):
        with torch.no_grad(), embedding_noise(model, seed=0, **noise):
            out = model.generate(**inputs, max_new_tokens=3, do_sample=False, output_scores=True,
                                 return_dict_in_generate=True)  # fmt: skip
        return torch.stack(out.scores)

    clean = scores()
    assert torch.equal(scores(gamma=0.0, modality="image"), clean)
    assert not torch.equal(scores(gamma=1.0, modality="image")[0], clean[0])


def test_image_noise_is_measured_once_recorded_and_refused_where_there_is_no_image(tmp_path):
    model, processor = tiny_vlm_pair("llava")
    args = ConstrainedSFTConfig(**settings(tmp_path / "run", noise_gamma=0.5, noise_modality="image"))
    trainer = ConstrainedSFTTrainer(model, args, train_dataset=image_dataset(8), processing_class=processor)
    sigma = trainer.noise.image_sigma
    assert sigma and sigma > 0
    trainer.train()
    report = json.loads((tmp_path / "run" / "constraints.json").read_text())
    assert report["noise_image_sigma_x"] == sigma and report["noise_sigma_x"] == trainer.noise.sigma
    with pytest.raises(EmbeddingNoiseError, match="'image' perturbs image features, but LlamaForCausalLM reads no"):
        args = ConstrainedSFTConfig(**settings(tmp_path / "text", noise_gamma=0.5, noise_modality="image"))
        from constrained_sft.testing import successor_dataset, tiny_tokenizer

        ConstrainedSFTTrainer(
            tiny_causal_lm(), args, train_dataset=successor_dataset(8), processing_class=tiny_tokenizer()
        )


def test_the_layers_leave_the_image_placeholders_out(tmp_path):
    """Every layer's loss, the last one's included, is the mean NLL of the supervised targets that are not image
    placeholders; the objective (eval_loss) is TRL's, over every supervised target."""
    model, processor = tiny_vlm_pair("idefics3")
    held_out = image_dataset(4, seed=9)
    args = ConstrainedSFTConfig(**settings(tmp_path, per_device_eval_batch_size=4))
    trainer = ConstrainedSFTTrainer(model, args, train_dataset=image_dataset(8), processing_class=processor)
    metrics = trainer.evaluate(held_out)
    batch = trainer.data_collator([dict(row) for row in held_out])
    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits[:, :-1].float()
    targets = batch["labels"][:, 1:]
    nll = F.cross_entropy(logits.transpose(1, 2), targets.clamp(min=0), reduction="none")
    read = targets.ne(-100) & ~torch.isin(targets, torch.tensor(placeholder_ids(model)))
    assert read.sum() < targets.ne(-100).sum()  # the images' placeholders are supervised by TRL's collator
    assert metrics["eval_layer_loss/2"] == pytest.approx(nll[read].mean().item(), rel=1e-5)
    assert metrics["eval_loss"] == pytest.approx(nll[targets.ne(-100)].mean().item(), rel=1e-5)
