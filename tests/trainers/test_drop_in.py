"""ConstrainedSFTTrainer as a drop-in for SFTTrainer: plain configs, half-precision models, other architectures'
final norms, a custom readout, generation untouched, and a model shared by two trainers."""

import pytest
import torch
from conftest import config_kwargs, duals
from trl import SFTConfig

from constrained_sft import ConstrainedSFTTrainer, ReadoutError
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer


def test_model_without_final_norm_gives_a_clear_error(make_trainer):
    model = tiny_causal_lm("llama")
    model.model.final = model.model.norm  # an architecture whose norm has an unknown name
    del model.model.norm
    model.model.norm = None
    with pytest.raises(ReadoutError, match=r"LlamaForCausalLM.*readout=CausalLMReadout"):
        make_trainer(model=model)


def test_custom_readout_is_used(make_trainer):
    from constrained_sft import CausalLMReadout

    model = tiny_causal_lm("llama")
    readout = CausalLMReadout(lm_head=model.lm_head, final_norm=model.model.norm)
    trainer = ConstrainedSFTTrainer(
        model=model,
        args=make_trainer(max_steps=1).args,
        train_dataset=successor_dataset(8),
        processing_class=tiny_tokenizer(),
        readout=readout,
    )
    assert trainer.readout is readout


@pytest.mark.parametrize("config", ["SFTConfig", "TrainingArguments"])
def test_plain_configs_are_converted_like_sft_trainer_does(tmp_path, caplog, config):
    """As with TRL's SFTTrainer: a plain config is accepted, its fields kept, the constraint fields at defaults."""
    from transformers import TrainingArguments

    from constrained_sft import ConstrainedSFTConfig

    cls = {"SFTConfig": SFTConfig, "TrainingArguments": TrainingArguments}[config]
    kwargs = config_kwargs(tmp_path, max_steps=2, learning_rate=0.02)
    with caplog.at_level("INFO", logger="constrained_sft.trainers.setup"):
        trainer = ConstrainedSFTTrainer(
            model=tiny_causal_lm(), args=cls(**kwargs), train_dataset=successor_dataset(8),
            processing_class=tiny_tokenizer(),
        )  # fmt: skip
    assert isinstance(trainer.args, ConstrainedSFTConfig) and trainer.args.learning_rate == 0.02
    assert trainer.args.constraints == "descent" and trainer.args.max_steps == 2 and not trainer.args.bf16
    assert any(f"got a {config}: converted to ConstrainedSFTConfig" in r.getMessage() for r in caplog.records)
    trainer.train()
    with pytest.raises(TypeError, match=r"`args` must be a ConstrainedSFTConfig \(or TrainingArguments"):
        ConstrainedSFTTrainer(model=tiny_causal_lm(), args={"output_dir": str(tmp_path)}, processing_class=None)


def test_generation_is_untouched(make_trainer):
    trainer = make_trainer(max_steps=1)
    model = trainer.model.eval()
    ids = torch.tensor([[1, 9, 10, 6]])
    out = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert torch.equal(out, tiny_causal_lm("llama").eval().generate(ids, max_new_tokens=3, do_sample=False))


def test_a_model_handed_to_two_trainers_trains_like_one(make_trainer):
    """The second trainer's TRL fused head wraps the forward again; the first trainer must still measure and train
    its constraints exactly as a trainer alone on the model does, and detaching both leaves no probe behind."""
    alone = make_trainer(max_steps=3, dual_lr=1.0)
    alone.train()
    model = tiny_causal_lm("llama")
    first = make_trainer(model=model, max_steps=3, dual_lr=1.0)
    second = make_trainer(model=model, max_steps=3, dual_lr=1.0)
    first.train()
    assert duals(first.state.log_history) == duals(alone.state.log_history)
    assert [r.get("loss") for r in first.state.log_history] == [r.get("loss") for r in alone.state.log_history]
    first.detach_probe()
    second.detach_probe()
    assert "_constrained_sft_probe_hook" not in model.__dict__
    with pytest.raises(ReadoutError, match="not attached"):
        second.train()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bf16", [False, True])
def test_half_precision_models_train_with_or_without_autocast(make_trainer, dtype, bf16):
    """TRL's suite loads models in float16 under CPU autocast (bf16=True); the readouts must follow the head's dtype."""
    trainer = make_trainer(model=tiny_causal_lm("llama").to(dtype), bf16=bf16, max_steps=2, dual_lr=1.0)
    trainer.train()
    duals_now = trainer.primal_dual.multipliers.value()
    assert torch.isfinite(duals_now).all() and duals_now.gt(0).any()


@pytest.mark.parametrize("arch", ["lfm2", "llava", "gemma3"])
def test_final_norms_found_from_the_model_itself(make_trainer, arch):
    """LFM2 names its final norm `embedding_norm`; LLaVA and Gemma3 keep theirs in `model.language_model`. The
    readout finds each (by name on the text decoder, else by which module outputs the last hidden state), trains,
    and its last layer reproduces the model's own loss."""
    from constrained_sft.testing import tiny_vlm

    model = tiny_causal_lm("lfm2") if arch == "lfm2" else tiny_vlm(arch)
    norm = model.model.embedding_norm if arch == "lfm2" else model.model.language_model.norm
    trainer = make_trainer(model=model, max_steps=2, dual_lr=1.0, eval_dataset=successor_dataset(8, seed=1))
    assert trainer.readout.final_norm is norm
    trainer.train()
    metrics = trainer.evaluate()
    assert metrics["eval_layer_loss/4"] == pytest.approx(metrics["eval_loss"], rel=1e-5)
    assert trainer.primal_dual.multipliers.value().gt(0).all()
