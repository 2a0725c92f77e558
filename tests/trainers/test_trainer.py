"""ConstrainedSFTTrainer on tiny models: drop-in behaviour, exactness of the dual step, checkpoints, features."""

import json

import pytest
import torch
from conftest import config_kwargs, duals
from datasets import Dataset
from trl import SFTConfig, SFTTrainer

from constrained_sft import ConstrainedSFTTrainer
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

LAYER_KEYS = [f"layer_loss/{i}" for i in range(1, 5)]


def test_logs_public_keys_and_writes_report(make_trainer, tmp_path):
    trainer = make_trainer(
        dual_lr=0.5, eval_dataset=successor_dataset(16, seed=1), eval_strategy="steps", eval_steps=3
    )
    trainer.train()
    train_rows = [r for r in trainer.state.log_history if "loss" in r]
    for key in [
        *LAYER_KEYS,
        "dual/2",
        "dual/4",
        "slack/2",
        "slack/4",
        "descent_fraction",
        "feasible_fraction",
        "mean_token_accuracy",
        "entropy",
        "num_tokens",
    ]:
        assert all(key in r for r in train_rows), key
    eval_row = next(r for r in trainer.state.log_history if "eval_loss" in r)
    for key in ["eval_layer_loss/1", "eval_layer_loss/4", "eval_descent_fraction", "eval_slack/3"]:
        assert key in eval_row
    # every token is read in evaluation: the last layer's loss is the model's own eval loss
    assert eval_row["eval_layer_loss/4"] == pytest.approx(eval_row["eval_loss"], rel=1e-5)
    report = json.loads((tmp_path / "out" / "constraints.json").read_text())
    assert report["layers"] == [1, 2, 3, 4] and set(report["dual"]) == {"2", "3", "4"}
    assert report["global_step"] == 6 and isinstance(report["feasible"], bool)
    assert report["dual"] == {k[5:]: v for k, v in duals(trainer.state.log_history)[6].items()}


def test_constraints_none_trains_exactly_like_sft_trainer(tmp_path):
    data = successor_dataset(64)
    plain = SFTTrainer(
        model=tiny_causal_lm("llama"),
        args=SFTConfig(**config_kwargs(tmp_path / "plain")),
        train_dataset=data,
        processing_class=tiny_tokenizer(),
    )
    plain.train()
    from constrained_sft import ConstrainedSFTConfig

    ours = ConstrainedSFTTrainer(
        model=tiny_causal_lm("llama"),
        args=ConstrainedSFTConfig(**config_kwargs(tmp_path / "ours"), constraints="none", layer_loss_tokens=3),
        train_dataset=data,
        processing_class=tiny_tokenizer(),
    )
    ours.train()
    a = [r["loss"] for r in plain.state.log_history if "loss" in r]
    b = [r["loss"] for r in ours.state.log_history if "loss" in r]
    assert a == b
    for (name, p), (_, q) in zip(plain.model.named_parameters(), ours.model.named_parameters(), strict=True):
        assert torch.equal(p, q), name
    row = next(r for r in ours.state.log_history if "loss" in r)
    assert all(k in row for k in LAYER_KEYS) and not any(k.startswith("dual/") for k in row)


def test_gradient_accumulation_gives_the_same_multipliers(make_trainer):
    """2 micro-batches of 2 rows equal one batch of 4, with 2 of each row's 7 supervised tokens sampled per layer."""
    kw = dict(dual_lr=0.5, descent_alpha=0.1, max_steps=4, learning_rate=1e-2, layer_loss_tokens=2)
    accumulated = make_trainer(per_device_train_batch_size=2, gradient_accumulation_steps=2, **kw)
    accumulated.train()
    single = make_trainer(
        per_device_train_batch_size=4, gradient_accumulation_steps=1, overwrite_output_dir=True, **kw
    )
    single.train()
    a, b = duals(accumulated.state.log_history), duals(single.state.log_history)
    assert a.keys() == b.keys() == {1, 2, 3, 4}
    for step in a:
        assert a[step]["dual/4"] > 0
        for key in a[step]:
            assert a[step][key] == pytest.approx(b[step][key], abs=1e-6), (step, key)


@pytest.mark.parametrize("dual_optimizer", ["sgd", "adam"])
def test_resume_reproduces_the_multiplier_trajectory(make_trainer, tmp_path, dual_optimizer):
    """With every random stream on: 2 of a row's 7 supervised tokens sampled per layer, training noise with a level
    range and a clean probability, 2 accumulated micro-batches: the resumed run equals the uninterrupted one."""
    from transformers import TrainerCallback

    kw = dict(
        dual_lr=0.3, descent_alpha=0.1, max_steps=6, dual_optimizer=dual_optimizer, save_strategy="steps", save_steps=3,
        layer_loss_tokens=2, noise_gamma=[0.0, 1.0], noise_clean_prob=0.3, gradient_accumulation_steps=2,
        per_device_train_batch_size=2,
    )  # fmt: skip
    full = make_trainer(**kw, output_dir=str(tmp_path / "full"))
    full.train()

    class StopAt3(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                control.should_training_stop = True

    interrupted = make_trainer(**kw, output_dir=str(tmp_path / "cut"))
    interrupted.add_callback(StopAt3())
    interrupted.train()
    checkpoint = tmp_path / "cut" / "checkpoint-3"
    assert (checkpoint / "constraint_state.safetensors").exists() and (checkpoint / "constraint_state.json").exists()
    assert not any(p.suffix in (".pkl", ".pickle") for p in checkpoint.iterdir())
    resumed = make_trainer(**kw, output_dir=str(tmp_path / "cut"))
    resumed.train(resume_from_checkpoint=str(checkpoint))
    a, b = duals(full.state.log_history), duals(resumed.state.log_history)
    for step in range(4, 7):
        for key in a[step]:
            assert b[step][key] == pytest.approx(a[step][key], abs=1e-6), (step, key)
    for (name, weight), (_, again) in zip(
        full.model.named_parameters(), resumed.model.named_parameters(), strict=True
    ):
        assert torch.equal(weight, again), name  # bit-exact on CPU
    report = json.loads((tmp_path / "cut" / "constraints.json").read_text())
    assert report["window_steps"] == [1, 6]  # the history survived the interruption


def test_warmup_keeps_penalty_and_duals_off(make_trainer):
    trainer = make_trainer(dual_lr=1.0, dual_init=0.25, constraint_warmup_steps=3, max_steps=5)
    trainer.train()
    lam = duals(trainer.state.log_history)
    assert all(v == 0.25 for step in (1, 2, 3) for v in lam[step].values())
    assert any(v != 0.25 for v in lam[5].values())


def test_batch_without_supervised_tokens_changes_nothing(make_trainer):
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    class MaskEverything(DataCollatorForLanguageModeling):
        def torch_call(self, examples):
            out = super().torch_call(examples)
            out["labels"][:] = -100
            return out

    trainer = make_trainer(dual_lr=1.0, dual_init=0.5, max_steps=2)
    trainer.data_collator = MaskEverything(pad_token_id=0)
    trainer.train()
    rows = [r for r in trainer.state.log_history if "loss" in r]
    assert all(r["loss"] == 0.0 and r["dual/4"] == 0.5 for r in rows)
    assert not any(k.startswith("layer_loss") for r in rows for k in r)


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
def test_other_architectures_and_tied_embeddings(make_trainer, arch):
    model = tiny_causal_lm(arch)
    trainer = make_trainer(model=model, max_steps=3, dual_lr=0.5)
    trainer.train()
    if arch == "gpt2":
        assert model.lm_head.weight is model.get_input_embeddings().weight
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in trainer.state.log_history if "loss" in r)


def test_peft_lora_and_gradient_checkpointing(make_trainer):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_causal_lm("llama"), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    frozen = {n: p.clone() for n, p in model.named_parameters() if not p.requires_grad}
    trainer = make_trainer(model=model, max_steps=3, dual_lr=1.0, gradient_checkpointing=True)
    trainer.train()
    assert duals(trainer.state.log_history)[3]["dual/4"] > 0
    for name, p in trainer.model.named_parameters():
        if name in frozen:
            assert torch.equal(p, frozen[name]), name


def test_padding_free_packing(make_trainer):
    trainer = make_trainer(packing=True, max_length=64, max_steps=3, dual_lr=0.5, per_device_train_batch_size=2)
    seen = []
    original = trainer.probe.measure

    def spy(hidden_states, output, request):
        seen.append(request.selection.segment_tokens.gt(0).sum().item())
        return original(hidden_states, output, request)

    trainer.probe.measure = spy
    trainer.train()
    assert max(seen) > 2  # several documents per packed row were treated as separate sequences


def test_conversational_dataset_with_sampled_tokens(make_trainer):
    rows = [
        {"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["completion"]}]}
        for r in successor_dataset(32)
    ]
    trainer = make_trainer(train_dataset=Dataset.from_list(rows), max_steps=2, layer_loss_tokens=2)
    trainer.train()
    assert "layer_loss/1" in trainer.state.log_history[0]


def test_bf16_layer_losses_stay_fp32(make_trainer):
    """A bf16 model under bf16 autocast: hidden states are bf16, the layer losses are accumulated in fp32."""
    trainer = make_trainer(model=tiny_causal_lm("llama").to(torch.bfloat16), bf16=True, max_steps=2, dual_lr=0.5)
    seen = []
    original = trainer.probe.measure

    def spy(hidden_states, output, request):
        result = original(hidden_states, output, request)
        seen.append((hidden_states[1].dtype, result.sums.dtype, torch.is_autocast_enabled("cpu")))
        return result

    trainer.probe.measure = spy
    trainer.train()
    assert seen and seen[0] == (torch.bfloat16, torch.float32, True)
    assert duals(trainer.state.log_history)[2]["dual/4"] > 0


def test_layer_and_alpha_mismatch_with_the_model(make_trainer):
    with pytest.raises(ValueError, match=r"constrained_layers.*\[7\].*1\.\.4"):
        make_trainer(constrained_layers=[2, 7])
    with pytest.raises(ValueError, match=r"descent_alpha` has 2 values.*3 descent steps"):
        make_trainer(descent_alpha=[0.1, 0.2])


@pytest.mark.parametrize("loss", ["nll", "chunked_nll", "dft", "label_smoothing"])
def test_every_trl_loss_path(make_trainer, loss):
    """TRL's fused path (nll, its deprecated alias chunked_nll, dft) and the full-logits label-smoothing path."""
    kw = {"label_smoothing_factor": 0.1} if loss == "label_smoothing" else {"loss_type": loss}
    trainer = make_trainer(max_steps=2, dual_lr=1.0, **kw)
    trainer.train()
    rows = [r for r in trainer.state.log_history if "loss" in r]
    assert all(torch.isfinite(torch.tensor(r["layer_loss/4"])) for r in rows)
    assert duals(trainer.state.log_history)[2]["dual/4"] > 0


@pytest.mark.parametrize(
    "shape, batch, expected",
    [
        (dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
              num_key_value_heads=3, vocab_size=49152), (4, 256), 4),  # SmolLM2-135M
        (dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
              num_key_value_heads=8, vocab_size=128256), (4, 512), 24),  # Llama 3.1 8B
    ],
)  # fmt: skip
def test_auto_sample_size_spends_the_readout_budget(shape, batch, expected):
    from transformers import LlamaConfig

    from constrained_sft.trainers.sft import _flops_per_token, auto_tokens_per_sequence

    config = LlamaConfig(**shape)
    V, D, n = config.vocab_size, config.hidden_size, config.num_hidden_layers - 1
    k = auto_tokens_per_sequence(config, (V, D), n, batch, batch[0], budget=0.1)
    assert k == expected
    step = _flops_per_token(config, batch[1]) * batch[0] * batch[1]
    assert n * 6 * D * V * k * batch[0] <= 0.1 * step < n * 6 * D * V * (k + 1) * batch[0]  # the largest k in budget
    assert auto_tokens_per_sequence(config, (V, D), n, batch, batch[0], budget=0.2) >= 2 * expected


def test_auto_sample_is_the_default_and_trains(make_trainer):
    trainer = make_trainer(max_steps=2)
    assert trainer.args.layer_loss_tokens == "auto" and trainer.args.readout_budget == 0.1
    labels = torch.zeros(4, 32, dtype=torch.long)
    k = trainer._sample_size(labels, None)
    assert isinstance(k, int) and k >= 1
    trainer.train()
    assert trainer.state.log_history[-1]["train_loss"] > 0


@pytest.mark.parametrize("tokens", ["auto", 3, None])
def test_the_shared_row_bound_holds_for_every_batch_shape(make_trainer, tokens):
    """The bound every rank computes alike from the config (B <= per_device_train_batch_size, T <= max_length) is at
    least the rows K of any training sample of unpacked rows, so a sharded head can make one readout call on every
    rank without an all-reduce; every token ('all') has no such bound."""
    trainer = make_trainer(max_steps=1, layer_loss_tokens=tokens, max_length=48, per_device_train_batch_size=4)
    if tokens is None:
        assert trainer._rows_bound is None
        return
    trainer.model.train()
    for B in (1, 3, 4):
        for T in (2, 4, 9, 33, 48):  # T = 4: k = 3 covers every position, the layers are read whole (B x T)
            labels = torch.randint(4, 32, (B, T))
            request = trainer._probe_request({"labels": labels})
            assert request.max_rows == trainer._rows_bound and request.selection.index.numel() <= trainer._rows_bound
    assert trainer._probe_request({"labels": labels, "position_ids": torch.arange(48).repeat(4, 1)}).max_rows is None


def test_a_batch_with_pre_shifted_labels_is_refused_naming_them(make_trainer):
    """Context / sequence parallelism is refused with the config; a collator that pre-shifts labels itself is refused
    at its first batch, before the forward (the layers are read at the positions of unshifted `labels`)."""
    trainer = make_trainer(max_steps=1)
    labels = torch.randint(4, 32, (2, 9))
    with pytest.raises(NotImplementedError, match=r"pre-shifted `shift_labels`.*returns `labels` only"):
        trainer._probe_request({"labels": labels, "shift_labels": labels[:, 1:]})


def _measured(metrics):
    return {k: v for k, v in metrics.items() if not k.endswith(("runtime", "per_second"))}


def test_predict_between_two_evaluations_changes_nothing(make_trainer):
    """Every evaluation / prediction loop starts from empty statistics, so a predict() leaks nothing."""
    trainer = make_trainer(eval_dataset=successor_dataset(16, seed=1))
    first = trainer.evaluate()
    trainer.predict(trainer.train_dataset)  # another (prepared) dataset
    assert _measured(trainer.evaluate()) == _measured(first)


def test_the_loss_and_its_gradient_are_the_lagrangian(make_trainer):
    """One step's loss and gradient equal those of f_L + lambda_eps (f_1 - eps) + sum_l lambda_l (f_l - (1 - alpha)
    f_(l-1)) computed directly with autograd: each layer read through the final norm and the LM head on every
    supervised token, the multipliers at dual_init."""
    import torch.nn.functional as F

    lam, alpha, eps = 0.3, 0.2, 3.0
    trainer = make_trainer(dual_init=lam, descent_alpha=alpha, descent_epsilon=eps, layer_loss_tokens=None)
    model = trainer.model.train()
    batch = next(iter(trainer.get_train_dataloader()))
    labels = batch["labels"][:, 1:]
    mask = labels != -100
    loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=mask.sum())
    loss.backward()
    ours = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()

    hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
    L = model.config.num_hidden_layers

    def f(layer):  # the last hidden state transformers returns is already normed
        h = hidden.hidden_states[layer]
        logits = model.lm_head(h if layer == L else model.model.norm(h))[:, :-1]
        return F.cross_entropy(logits[mask], labels[mask], reduction="sum") / mask.sum()

    fs = [f(layer) for layer in range(1, L + 1)]
    lagrangian = fs[-1] + lam * (fs[0] - eps) + sum(lam * (fs[i] - (1 - alpha) * fs[i - 1]) for i in range(1, L))
    lagrangian.backward()
    assert loss.item() == pytest.approx(lagrangian.item(), rel=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(ours[name], p.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_an_unreachable_last_layer_bound_is_flagged_at_the_first_step(make_trainer, caplog):
    trainer = make_trainer(descent_alpha=0.5, descent_epsilon=0.05, max_steps=2)  # f_4 <= 0.05 x 0.5^3
    with caplog.at_level("WARNING", logger="constrained_sft.trainers.constrained"):
        trainer.train()
    flagged = [r.getMessage() for r in caplog.records if "The constraints imply f_4 <=" in r.getMessage()]
    assert len(flagged) == 1 and "descent_epsilon 0.05 x (1 - 0.5)^3 = 0.00625 nats" in flagged[0]
