"""Robustness evaluation on tiny models: exact accuracy, seeded noise, descent share, report files, errors."""

import json

import pytest
import torch
from datasets import Dataset

from constrained_sft.constraints import LayerLosses, descent_counts
from constrained_sft.data import DataArguments, DataError, ModelPathError, ModelSpec
from constrained_sft.evaluation import RobustnessArguments, evaluate_level, run
from constrained_sft.evaluation.robustness.metrics import example_descents, step_ratios
from constrained_sft.tasks import Measure, get_task
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer

SFT = get_task("sft")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("model")
    tiny_causal_lm("llama", seed=3).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    (path / "constraints.json").write_text(json.dumps({"layers": [2, 3, 4], "noise_gamma": 0.5}))
    return str(path)


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in successor_dataset(40, seed=5)))
    return str(path)


def _trainer(model_dir, rows, tmp_path):
    model, tokenizer = SFT.measuring.load_model(ModelSpec("m", model_dir), torch.float32)
    return SFT.measuring.measuring_trainer(model, tokenizer, rows, Measure("all", 8, 64, False, str(tmp_path), None))


def test_clean_accuracy_equals_a_direct_computation(model_dir, tmp_path):
    rows = successor_dataset(12, seed=5)
    trainer = _trainer(model_dir, rows, tmp_path)
    result = evaluate_level(SFT, trainer, gamma=0.0, seed=0)
    correct = total = nll = 0.0
    model = trainer.model.eval()
    for batch in trainer.get_eval_dataloader():
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
        labels = batch["labels"][:, 1:]
        mask = labels != -100
        correct += (logits.argmax(-1) == labels)[mask].sum().item()
        total += mask.sum().item()
        nll += torch.nn.functional.cross_entropy(logits[mask], labels[mask], reduction="sum").item()
    assert result.metric == pytest.approx(correct / total, abs=1e-12)  # a ratio of the same integer counts
    assert result.loss == pytest.approx(nll / total, rel=1e-5)
    assert result.layer_loss[4] == pytest.approx(nll / total, rel=1e-5)  # the last layer's readout is the model
    # per sequence (one unit per held-out row): the sums that pool into the level's numbers
    assert len(result.scores["count"]) == len(rows) and result.scores["count"].sum() == total
    assert result.scores["correct"].sum() == correct and result.scores["loss"].sum() == pytest.approx(nll, rel=1e-5)


def test_seeded_noise_is_reproducible(model_dir, tmp_path):
    trainer = _trainer(model_dir, successor_dataset(12, seed=5), tmp_path)
    a, b = evaluate_level(SFT, trainer, 1.0, seed=7), evaluate_level(SFT, trainer, 1.0, seed=7)
    c = evaluate_level(SFT, trainer, 1.0, seed=8)
    assert (a.metric, a.loss, a.ratios.tolist()) == (b.metric, b.loss, b.ratios.tolist())
    assert a.loss != c.loss


def test_descent_share_on_a_hand_made_example():
    per_seq = torch.tensor([[4.0, 2.0, 9.0], [3.0, 2.5, 1.0], [3.5, 1.0, 2.0]])  # [layers, sequences]
    losses = LayerLosses(
        sums=torch.zeros(3), per_sequence=per_seq, segment_tokens=torch.tensor([3, 5, 0]), num_tokens=torch.tensor(8)
    )
    ratios = step_ratios(losses)  # sequence 2 has no token and is left out
    assert ratios.tolist() == pytest.approx([3.0 / 4.0, 2.5 / 2.0, 3.5 / 3.0, 1.0 / 2.5])
    assert ratios.lt(1).double().mean().item() == 0.5
    assert descent_counts(losses)[0].item() / descent_counts(losses)[1].item() == 0.5
    descents, steps = example_descents(losses)  # per sequence: what a unit carries into the intervals
    assert descents.tolist() == [1, 1, 0] and steps.tolist() == [2, 2, 0]


def test_report_files_hold_the_numbers(model_dir, data_file, tmp_path):
    out = tmp_path / "report"
    args = RobustnessArguments(
        models=[model_dir, model_dir],
        names=["a", "b"],
        output_dir=str(out),
        gammas=[0.0, 0.5, 1.0],
        seeds=2,
        batch_size=8,
        max_length=64,
    )
    results = run(args, DataArguments(dataset_name=data_file, eval_size=12)).to_dict()  # the saved (JSON) form
    for name in (
        "results.json",
        "results.csv",
        "report.html",
        "accuracy_vs_gamma.png",
        "layer_losses.png",
        "layer_ratios.png",
        "descent_vs_gamma.png",
    ):
        assert (out / name).stat().st_size > 0, name
    saved = json.loads((out / "results.json").read_text())
    from constrained_sft.evaluation import RobustnessResults

    assert RobustnessResults.load(str(out)).to_dict() == saved == results  # one JSON form, read back whole
    summary = saved["models"]["a"]["summary"]
    assert saved["settings"]["train_gamma"] == 0.5 and saved["models"]["a"]["layers"] == [2, 3, 4]
    assert [r["gamma"] for r in summary["levels"]] == [0.0, 0.5, 1.0]
    clean = summary["levels"][0]
    assert clean["accuracy_std"] == 0.0  # no noise at gamma 0: every seed agrees
    assert summary["levels"][2]["accuracy_std"] > 0 or summary["levels"][2]["loss_std"] > 0
    assert summary["id_accuracy"] == pytest.approx(
        (clean["accuracy_mean"] + summary["levels"][1]["accuracy_mean"]) / 2
    )
    assert summary["ood_accuracy"] == pytest.approx(summary["levels"][2]["accuracy_mean"])
    same = saved["comparisons"]["a - b"]  # the same model twice: every difference is 0, with no width
    assert same["auc"]["difference"] == {
        "estimate": 0.0,
        "low": 0.0,
        "high": 0.0,
        "confidence": 0.95,
        "verdict": "same",
    }
    page = (out / "report.html").read_text()
    assert (
        f"{summary['auc']:.4f}" in page and f"{clean['accuracy_mean']:.4f}" in page and "data:image/png;base64" in page
    )
    assert "<h2>a - b</h2>" in page and "accuracy@0.5" in page
    csv = (out / "results.csv").read_text().splitlines()
    statistics = 3 + 4  # accuracy at 3 levels, ID, OOD, AUC, change, descent share
    assert len(csv) == 1 + 2 * 3 + statistics + 1 and csv[1].startswith("level,a,0.0,")
    assert any(line.startswith("difference,a - b,0.5,") for line in csv)
    assert results["models"]["a"]["summary"]["auc"] == summary["auc"]


def test_bad_input(model_dir, data_file, tmp_path):
    out = str(tmp_path / "r")
    with pytest.raises(ModelPathError, match="does not exist"):
        run(
            RobustnessArguments(models=[str(tmp_path / "nope" / "model")], output_dir=out),
            DataArguments(dataset_name=data_file),
        )
    with pytest.raises(ValueError, match="gammas.*>= 0"):
        run(
            RobustnessArguments(models=[model_dir], output_dir=out, gammas=[0.0, -1.0]),
            DataArguments(dataset_name=data_file),
        )
    empty = tmp_path / "empty.jsonl"
    Dataset.from_list([{"prompt": "s1 =", "completion": " s2"}]).to_json(empty)
    with pytest.raises(DataError, match="Cannot carve"):
        run(RobustnessArguments(models=[model_dir], output_dir=out), DataArguments(dataset_name=str(empty)))
    with pytest.raises(ValueError, match="`--names` has 1 names for 0 models"):  # the caller's arms name themselves
        RobustnessArguments(names=["a"], output_dir=out).validate({"a": [("a", model_dir)]})
    assert not (tmp_path / "r").exists()


def test_one_noise_scale_for_every_model_compared(model_dir, data_file, tmp_path, monkeypatch):
    """Twins whose training moved their embeddings apart are perturbed with the sigma_x their training recorded."""
    from constrained_sft.noise import embedding_sigma
    from constrained_sft.trainers import noise as trainer_noise  # every evaluation level goes through the trainer's

    moved = tmp_path / "moved"  # the same model with its embedding table scaled by 3: its own sigma_x triples
    model = tiny_causal_lm("llama", seed=3)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(3.0)
    model.save_pretrained(moved)
    tiny_tokenizer().save_pretrained(moved)
    recorded = 0.0123
    (moved / "constraints.json").write_text(json.dumps({"layers": [2, 3, 4], "noise_sigma_x": recorded}))
    used = []
    original = trainer_noise.noisy
    monkeypatch.setattr(trainer_noise, "noisy", lambda *a, **kw: used.append(kw["sigma"]) or original(*a, **kw))
    args = RobustnessArguments(
        models=[str(moved), model_dir], names=["a", "b"], output_dir=str(tmp_path / "r"), gammas=[0.0, 1.0], seeds=1
    )
    results = run(args, DataArguments(dataset_name=data_file, eval_size=8)).to_dict()  # the saved (JSON) form
    assert set(used) == {recorded} and len(used) == 4  # 2 models x 2 levels x 1 seed, one scale
    assert results["settings"]["sigma_x"] == recorded and "constraints.json" in results["settings"]["sigma_x_source"]
    assert results["models"]["a"]["noise_sigma_x_recorded"] == recorded
    used.clear()  # no recorded scale: the first model's own, measured once, for both
    args = RobustnessArguments(
        models=[model_dir, str(moved)], names=["b", "a"], output_dir=str(tmp_path / "s"), gammas=[1.0], seeds=1
    )
    results = run(args, DataArguments(dataset_name=data_file, eval_size=8)).to_dict()  # the saved (JSON) form
    own = embedding_sigma(SFT.measuring.load_model(ModelSpec("b", model_dir), torch.float32)[0])
    assert (
        used == [pytest.approx(own)] * 2
        and results["settings"]["sigma_x_source"] == "measured on b's input embeddings"
    )
    with pytest.raises(ValueError, match="sigma_x` must be a finite number > 0"):
        run(RobustnessArguments(models=[model_dir], output_dir=str(tmp_path / "t"), sigma_x=-1.0), DataArguments())
