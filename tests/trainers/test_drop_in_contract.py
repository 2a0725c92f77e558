"""
The drop-in contract, as a test: for each way TRL 1.16's `SFTTrainer` accepts data and each model dtype it accepts,
both trainers are built on the same arguments and train two steps, ours with constraints on. Ours must run wherever
the parent runs, or refuse in one line with an error the drop-in guide lists as a deliberate difference
(`DELIBERATE`, checked against docs/guides/sft.md).
"""

import os

import pytest
import torch
from datasets import Dataset
from trl import SFTConfig, SFTTrainer

from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# error text -> the phrase of the drop-in guide's list of deliberate differences that covers it
DELIBERATE = {
    "lets training sequences of": "Training sequences longer than the model's positions",
    "`constraint_warmup_epochs` counts epochs": "`constraint_warmup_epochs` with a streamed training set",
    "has no rows": "A dataset with no rows",
}


def _text(n: int) -> Dataset:
    rows = successor_dataset(n)
    return rows.map(lambda r: {"text": r["prompt"] + r["completion"]}, remove_columns=rows.column_names)


def _messages(n: int) -> Dataset:
    rows = successor_dataset(n)
    return Dataset.from_list(
        [
            {"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["completion"]}]}
            for r in rows
        ]
    )


def _assistant_masks_tokenizer():
    """The tiny tokenizer with a chat template that marks the assistant's tokens (`{% generation %}`), as TRL's
    `assistant_only_loss` needs."""
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = (
        "{% for message in messages %}{% if message['role'] == 'assistant' %}{{ 'assistant: ' }}{% generation %}"
        "{{ message['content'] + ' ' + eos_token }}{% endgeneration %}{% else %}"
        "{{ message['role'] + ': ' + message['content'] + ' ' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
    )
    return tokenizer


def _question_answer(n: int) -> Dataset:
    rows = successor_dataset(n)
    return Dataset.from_list([{"question": r["prompt"], "answer": r["completion"]} for r in rows])


def _tokenized(n: int) -> Dataset:
    tokenizer = tiny_tokenizer()
    return _text(n).map(lambda r: {"input_ids": tokenizer(r["text"])["input_ids"]}, remove_columns=["text"])


# name -> (train_dataset, eval_dataset, SFTConfig fields, trainer keyword arguments)
WAYS = {
    "map-style": lambda: (successor_dataset(32), None, {}, {}),
    "iterable": lambda: (successor_dataset(32).to_iterable_dataset(), None, {}, {}),
    "iterable-text-packed": lambda: (_text(32).to_iterable_dataset(), None, {"packing": True, "max_length": 32}, {}),
    "dict-of-eval-sets": lambda: (
        successor_dataset(32),
        {"a": successor_dataset(8, seed=1), "b": successor_dataset(8, seed=2)},
        {"eval_strategy": "steps", "eval_steps": 2},
        {},
    ),
    "pre-tokenized": lambda: (_tokenized(32), None, {}, {}),
    "formatting-func": lambda: (
        _question_answer(32),
        None,
        {},
        {"formatting_func": lambda r: r["question"] + r["answer"]},
    ),
    "packed": lambda: (_text(32), None, {"packing": True, "max_length": 32}, {}),
    "completion-only": lambda: (successor_dataset(32), None, {"completion_only_loss": True}, {}),
    "assistant-only": lambda: (
        _messages(32),
        None,
        {"assistant_only_loss": True},
        {"processing_class": _assistant_masks_tokenizer()},
    ),
    "iterable-assistant-only": lambda: (
        _messages(32).to_iterable_dataset(),
        None,
        {"assistant_only_loss": True},
        {"processing_class": _assistant_masks_tokenizer()},
    ),
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _train(cls, config_cls, tmp_path, way: str, dtype: torch.dtype):
    train, evaluation, fields, kwargs = WAYS[way]()
    config = config_cls(
        output_dir=str(tmp_path / cls.__name__), report_to="none", bf16=False, use_cpu=True, max_steps=2,
        per_device_train_batch_size=4, per_device_eval_batch_size=4, save_strategy="no", disable_tqdm=True,
        learning_rate=1e-3, **fields,
    )  # fmt: skip
    if config_cls is ConstrainedSFTConfig:
        config.dual_lr = 0.5
    kwargs = {"processing_class": tiny_tokenizer(), **kwargs}
    trainer = cls(
        model=tiny_causal_lm("llama").to(dtype), args=config, train_dataset=train, eval_dataset=evaluation, **kwargs
    )
    trainer.train()
    return trainer


# fp32 in the default suite; the half-precision weights (the same code paths, the readout in the head's dtype) slow
@pytest.mark.parametrize("dtype", ["fp32", *(pytest.param(d, marks=pytest.mark.slow) for d in ("bf16", "fp16"))])
@pytest.mark.parametrize("way", sorted(WAYS))
def test_ours_trains_wherever_sft_trainer_does(tmp_path, way, dtype):
    try:
        parent = _train(SFTTrainer, SFTConfig, tmp_path, way, DTYPES[dtype])
    except Exception as error:  # the parent refuses this combination itself: nothing to promise
        pytest.skip(f"SFTTrainer itself fails: {type(error).__name__}: {str(error)[:200]}")
    assert parent.state.global_step == 2
    try:
        ours = _train(ConstrainedSFTTrainer, ConstrainedSFTConfig, tmp_path, way, DTYPES[dtype])
    except ValueError as error:
        message = str(error)
        listed = [phrase for text, phrase in DELIBERATE.items() if text in message]
        assert listed and "\n" not in message, f"a difference the drop-in guide does not list: {message}"
        return
    assert ours.state.global_step == 2
    assert torch.isfinite(ours.primal_dual.multipliers.value()).all()
    assert ours.primal_dual.multipliers.value().gt(0).any()  # the constraints were on and moved


def test_every_deliberate_difference_is_in_the_drop_in_guide():
    with open(os.path.join(ROOT, "docs", "guides", "sft.md")) as f:
        guide = " ".join(f.read().split())
    for phrase in DELIBERATE.values():
        assert phrase in guide, phrase


def test_a_diverging_half_precision_run_stops_where_sft_trainer_runs_on_to_a_nan_model(tmp_path):
    """The deliberate difference the guide lists first: fp16 weights at learning rate 0.1 diverge; `SFTTrainer`
    trains to the end and leaves non-finite weights, ours stops at the first non-finite step with one line."""
    from constrained_sft.trainers import NonFiniteStepError

    def config(cls):
        return cls(
            output_dir=str(tmp_path / cls.__name__), report_to="none", bf16=False, use_cpu=True, max_steps=8,
            per_device_train_batch_size=4, save_strategy="no", disable_tqdm=True, learning_rate=0.1,
        )  # fmt: skip

    def model():
        return tiny_causal_lm("llama").to(torch.float16)

    parent = SFTTrainer(model=model(), args=config(SFTConfig), train_dataset=successor_dataset(32),
                        processing_class=tiny_tokenizer())  # fmt: skip
    parent.train()
    assert parent.state.global_step == 8
    assert not all(torch.isfinite(p).all() for p in parent.model.parameters())  # it saved a broken model
    ours = ConstrainedSFTTrainer(model=model(), args=config(ConstrainedSFTConfig), train_dataset=successor_dataset(32),
                                 processing_class=tiny_tokenizer())  # fmt: skip
    with pytest.raises(NonFiniteStepError) as stopped:
        ours.train()
    assert "\n" not in str(stopped.value) and "nonfinite_steps" in str(stopped.value)
    assert all(torch.isfinite(p).all() for p in ours.model.parameters())  # nothing of the bad step was applied
