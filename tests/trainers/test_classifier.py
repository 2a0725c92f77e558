"""ConstrainedTrainer on tiny encoders: readout exactness, training, accumulation, noise, errors, the CLI."""

import json

import pytest
import torch
import transformers
from conftest import duals
from datasets import Dataset

from constrained_sft import ClassifierReadout, ConstrainedConfig, ConstrainedTrainer, ReadoutError
from constrained_sft.testing import presence_dataset as synthetic
from constrained_sft.testing import tiny_encoder, tiny_tokenizer

ARCHS = ["bert", "distilbert", "roberta"]


def make(tmp_path, model=None, **overrides):
    kw = dict(
        output_dir=str(tmp_path / "out"),
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        per_device_train_batch_size=8,
        per_device_eval_batch_size=16,
        learning_rate=5e-3,
        logging_steps=1,
        max_steps=4,
        seed=0,
        disable_tqdm=True,
        dual_lr=0.5,
        descent_alpha=0.1,
    )
    kw.update(overrides)
    return ConstrainedTrainer(
        model=model if model is not None else tiny_encoder(),
        args=ConstrainedConfig(**kw),
        train_dataset=synthetic(),
        eval_dataset=synthetic(32, seed=1),
        data_collator=transformers.DataCollatorWithPadding(tiny_tokenizer()),
    )


@pytest.mark.parametrize("arch", ARCHS)
def test_last_layer_readout_equals_the_model(arch):
    model = tiny_encoder(arch).eval()
    batch = synthetic(8).with_format("torch")[:]
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        labels=batch["labels"],
        output_hidden_states=True,
    )
    readout = ClassifierReadout.from_model(model)
    logits = readout(out.hidden_states[-1])
    torch.testing.assert_close(logits, out.logits)
    loss = torch.nn.functional.cross_entropy(logits, batch["labels"])
    assert abs(loss.item() - out.loss.item()) / out.loss.item() < 1e-5
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1


@pytest.mark.parametrize("arch", ARCHS)
def test_trains_and_logs_the_public_keys(tmp_path, arch):
    trainer = make(
        tmp_path, tiny_encoder(arch), eval_strategy="steps", eval_steps=4, noise_gamma=0.5, eval_noise_gammas=[1.0]
    )
    trainer.train()
    row = next(r for r in trainer.state.log_history if "loss" in r)
    for key in [
        "layer_loss/1",
        "layer_loss/4",
        "dual/2",
        "dual/4",
        "slack/3",
        "descent_fraction",
        "feasible_fraction",
        "accuracy",
    ]:
        assert key in row, key
    ev = {k: v for r in trainer.state.log_history if any(k.startswith("eval_") for k in r) for k, v in r.items()}
    for key in [
        "eval_accuracy",
        "eval_layer_loss/4",
        "eval_descent_fraction",
        "eval_gamma_1_loss",
        "eval_gamma_1_accuracy",
    ]:
        assert key in ev, key
    assert ev["eval_layer_loss/4"] == pytest.approx(ev["eval_loss"], rel=1e-5)
    report = json.loads((tmp_path / "out" / "constraints.json").read_text())
    assert report["layers"] == [1, 2, 3, 4] and report["noise_gamma"] == 0.5


def test_gradient_accumulation_gives_the_same_multipliers(tmp_path):
    a = make(tmp_path / "a", per_device_train_batch_size=4, gradient_accumulation_steps=2)
    a.train()
    b = make(tmp_path / "b", per_device_train_batch_size=8, gradient_accumulation_steps=1)
    b.train()
    da, db = duals(a.state.log_history), duals(b.state.log_history)
    assert max(da[4].values()) > 0
    for step in da:
        for key in da[step]:
            assert da[step][key] == pytest.approx(db[step][key], abs=1e-6), (step, key)


def test_constraints_none_matches_plain_trainer(tmp_path):
    ours = make(tmp_path / "ours", constraints="none")
    ours.train()
    plain = transformers.Trainer(
        model=tiny_encoder(),
        args=transformers.TrainingArguments(
            output_dir=str(tmp_path / "plain"),
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            per_device_train_batch_size=8,
            learning_rate=5e-3,
            logging_steps=1,
            max_steps=4,
            seed=0,
            disable_tqdm=True,
        ),
        train_dataset=synthetic(),
        data_collator=transformers.DataCollatorWithPadding(tiny_tokenizer()),
    )
    plain.train()
    assert [r["loss"] for r in ours.state.log_history if "loss" in r] == [
        r["loss"] for r in plain.state.log_history if "loss" in r
    ]


def test_encoder_without_a_recognisable_head(tmp_path):
    model = tiny_encoder("bert")
    model.bert.pooler = None  # a head layout the readout does not know
    with pytest.raises(ReadoutError, match=r"BertForSequenceClassification.*ClassifierReadout\(head=fn\)"):
        make(tmp_path, model)


def test_multi_label_heads_are_refused(tmp_path):
    model = tiny_encoder(num_labels=3)
    model.config.problem_type = "multi_label_classification"
    with pytest.raises(ValueError, match="multi-label.*'regression'"):
        make(tmp_path, model)


@pytest.fixture
def classifier_dir(tmp_path):
    """A tiny BERT classifier saved as a model folder, with its tokenizer, and a local CSV in the tokenizer's words."""
    path = tmp_path / "bert"
    tiny_encoder("bert").save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    rows = [
        {"text": " ".join(f"s{(i * 7 + j) % 24}" for j in range(6)), "label": ["neg", "pos"][i % 2]} for i in range(60)
    ]
    Dataset.from_list(rows).to_csv(tmp_path / "reviews.csv")
    return str(path), str(tmp_path / "reviews.csv")


ARCHITECTURE_ARGS = {  # the model's own head, the paper's shared linear readout, the paper's UT on its embeddings
    "head": ["--classifier_readout", "head"],
    "linear": ["--classifier_readout", "linear"],
    "ut": ["--classifier_architecture", "ut", "--classifier_readout", "linear", "--classifier_pooling", "mean"],
}
ARCHITECTURE_SAVED = {
    "head": "BertForSequenceClassification",
    "linear": "PooledLinearForSequenceClassification",
    "ut": "UTForSequenceClassification",
}


@pytest.mark.parametrize("readout", list(ARCHITECTURE_ARGS))
def test_cli_trains_a_classifier_and_eval_robustness_reads_it(tmp_path, classifier_dir, capsys, readout):
    from constrained_sft.cli import main as cli

    model, data = classifier_dir
    out = tmp_path / "out"
    common = ["--dataset_name", data, "--dataset_test_split", "none", "--eval_size", "12", "--max_seq_length", "16"]
    assert (
        cli(
            [
                "train",
                "--task",
                "classification",
                "--model_name_or_path",
                model,
                *common,
                "--output_dir",
                str(out),
                "--max_steps",
                "3",
                "--per_device_train_batch_size",
                "8",
                "--use_cpu",
                "true",
                "--report_to",
                "none",
                "--save_strategy",
                "no",
                "--noise_gamma",
                "0.5",
                "--evaluate_before_training",
                "true",
                *ARCHITECTURE_ARGS[readout],
            ]
        )
        == 0
    )
    assert "accuracy" in capsys.readouterr().out and (out / "constraints.json").exists()
    saved = json.loads((out / "config.json").read_text())
    assert saved["architectures"] == [ARCHITECTURE_SAVED[readout]]
    report = tmp_path / "report"
    assert (
        cli(
            [
                "eval",
                "robustness",
                "--task",
                "classification",
                "--models",
                str(out),
                model,
                "--names",
                "trained",
                "base",
                *common,
                "--gammas",
                "0",
                "0.5",
                "1",
                "--seeds",
                "2",
                "--output_dir",
                str(report),
            ]
        )
        == 0
    )
    results = json.loads((report / "results.json").read_text())
    assert results["headline"]["label"] == "accuracy (examples)" and results["settings"]["train_gamma"] == 0.5
    levels = results["models"]["trained"]["summary"]["levels"]
    assert [r["gamma"] for r in levels] == [0.0, 0.5, 1.0] and set(levels[0]["layer_loss"]) == set(
        "123" if readout == "ut" else "1234"
    )
    assert 0 <= levels[0]["accuracy_mean"] <= 1 and "auc" in results["comparisons"]["trained - base"]
    scores = results["models"]["trained"]["scores"]  # per example, summed over the 2 noise seeds: paired comparisons
    assert list(scores) == ["0.0", "0.5", "1.0"] and len(scores["0.5"]["correct"]) == 12
    assert set(scores["0.5"]["count"]) == {2.0}  # one per example and noise seed
    assert sum(scores["0.0"]["correct"]) / 24 == pytest.approx(levels[0]["accuracy_mean"])


def test_predict_between_two_evaluations_changes_nothing(tmp_path):
    trainer = make(tmp_path)
    first = trainer.evaluate()
    trainer.predict(synthetic(32, seed=7))
    second = trainer.evaluate()
    assert {k: v for k, v in second.items() if "runtime" not in k and "per_second" not in k} == {
        k: v for k, v in first.items() if "runtime" not in k and "per_second" not in k
    }


def test_training_arguments_are_converted(tmp_path):
    trainer = ConstrainedTrainer(
        model=tiny_encoder(),
        args=transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", max_steps=1),
        train_dataset=synthetic(16),
        data_collator=transformers.DataCollatorWithPadding(tiny_tokenizer()),
    )
    assert isinstance(trainer.args, ConstrainedConfig) and trainer.args.max_steps == 1
    trainer.train()
