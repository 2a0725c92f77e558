"""Every constrained run leaves a model card (README.md) in its output folder and in each checkpoint, as TRL does:
the objective, the dual optimizer, the feasibility verdict and the per-layer table of constraints.json, the noise,
the versions, the citation and the tags; `push_to_hub` uploads it with constraints.json."""

import json
import os
from pathlib import Path

from huggingface_hub import ModelCard

from constrained_sft.version import VERSION


def test_a_run_and_its_checkpoint_carry_the_card_with_the_constraint_table(make_trainer, tmp_path):
    trainer = make_trainer(max_steps=4, save_strategy="steps", save_steps=2, noise_gamma=0.5, dual_lr=0.1)
    trainer.train()
    out = tmp_path / "out"
    card = ModelCard.load(out / "README.md")
    report = json.loads((out / "constraints.json").read_text())
    assert {"constrained-sft", "descent-constraints", "trl", "sft"} <= set(card.data.tags)
    text = card.text
    assert "| objective | `descent` |" in text and "| dual optimizer | sgd, dual_lr 0.1, resilience 0 |" in text
    assert "gamma 0.5 x sigma_x" in text and f"constrained-sft: {VERSION}" in text
    assert "Porras-Valenzuela" in text and "| optimizer steps | 4 |" in text
    verdict = "**Feasible**" if report["feasible"] else "**Infeasible**"
    assert verdict in text
    for layer in report["layers"][1:]:  # every constrained layer's row, with the loss constraints.json recorded
        loss = f"{report['layer_loss'][str(layer)]:.4g}"
        assert f"| {layer} | {loss} | f_{layer} <= 0.95 f_" in text
    checkpoint = ModelCard.load(out / "checkpoint-2" / "README.md")
    assert "| optimizer steps | 2 |" in checkpoint.text  # the checkpoint's own card, of the run so far
    marker = json.loads((out / "checkpoint-2" / "checkpoint_complete.json").read_text())
    assert "README.md" in marker["files"]  # written before the completion marker: part of the whole checkpoint


def test_a_readme_of_the_users_is_kept_and_the_card_goes_beside_it(make_trainer, tmp_path, caplog):
    """output_dir holding the user's own README.md: never replaced (byte for byte), the card is MODEL_CARD.md, said
    once; a README.md this library wrote is its card and is rewritten."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.md").write_bytes(b"# My notes\n\nkeep me\n")
    trainer = make_trainer(max_steps=2)
    trainer.train()
    assert (out / "README.md").read_bytes() == b"# My notes\n\nkeep me\n"
    assert "## Constraints" in (out / "MODEL_CARD.md").read_text()
    said = [r.getMessage() for r in caplog.records if "is not the model card constrained-sft wrote" in r.getMessage()]
    assert len(said) == 1 and "MODEL_CARD.md" in said[0]
    (out / "README.md").unlink()
    (out / "MODEL_CARD.md").rename(out / "README.md")  # the library's own card as README.md: rewritten
    trainer.create_model_card()
    assert "## Constraints" in (out / "README.md").read_text() and not (out / "MODEL_CARD.md").exists()


def test_the_card_never_replaces_what_the_library_did_not_write(make_trainer, tmp_path, caplog):
    """What the output folder's record (`.written-by.json`) lists with its bytes is the card; anything else at its
    names is the user's and kept byte for byte: a card the user edited (its first line kept), a README.md linked to
    another run's card (not followed), a folder; with both names the user's, training is refused before any step."""
    import pytest

    from constrained_sft.trainers.model_card import CardPathError

    out = tmp_path / "out"
    make_trainer(max_steps=2).train()
    record = json.loads((out / ".written-by.json").read_text())
    assert record["by"] == "constrained-sft" and list(record["files"]) == ["README.md"]
    edited = (out / "README.md").read_text() + "\n## My evaluation\n\nkept.\n"  # the mark on its first lines kept
    (out / "README.md").write_text(edited)
    trainer = make_trainer(max_steps=2)
    trainer.create_model_card()
    assert (out / "README.md").read_text() == edited and "## Constraints" in (out / "MODEL_CARD.md").read_text()
    trainer.create_model_card()  # MODEL_CARD.md is the library's now: rewritten, README.md still kept
    assert (out / "README.md").read_text() == edited

    other = tmp_path / "other-run-card.md"
    other.write_text("another run's card\n")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "README.md").symlink_to(other)
    make_trainer(max_steps=1, output_dir=linked).train()
    assert other.read_text() == "another run's card\n" and (linked / "README.md").is_symlink()
    assert "## Constraints" in (linked / "MODEL_CARD.md").read_text()

    blocked = tmp_path / "blocked"
    (blocked / "README.md").mkdir(parents=True)
    make_trainer(max_steps=1, output_dir=blocked).train()  # README.md a folder: the card beside it
    assert (blocked / "README.md").is_dir() and "## Constraints" in (blocked / "MODEL_CARD.md").read_text()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "README.md").write_text("mine\n")
    (theirs / "MODEL_CARD.md").write_text("mine too\n")
    with pytest.raises(CardPathError, match=r"holds a README.md and a MODEL_CARD.md this library did not write"):
        make_trainer(max_steps=1, output_dir=theirs).train()
    assert sorted(p.name for p in theirs.iterdir()) == ["MODEL_CARD.md", "README.md"]  # nothing trained or written


def test_an_unconstrained_twin_says_what_was_measured(make_trainer, tmp_path):
    make_trainer(max_steps=2, constraints="none").train()
    card = ModelCard.load(tmp_path / "out" / "README.md")
    assert "erm" in card.data.tags and "| dual optimizer | none (no dual ascent) |" in card.text
    assert "Trained without constraints; measured:" in card.text and "| training noise | none (gamma 0) |" in card.text


def test_push_to_hub_uploads_the_card_and_the_report(make_trainer, tmp_path, monkeypatch):
    import transformers.trainer as hf_trainer

    uploaded = {}

    class Api:
        def upload_folder(self, folder_path, **kwargs):
            for name in os.listdir(folder_path):
                if name.endswith((".md", ".json")):
                    uploaded[name] = Path(folder_path, name).read_text()

    monkeypatch.setattr(hf_trainer, "hf_api", lambda: Api())
    trainer = make_trainer(max_steps=2)
    trainer.train()
    trainer.hub_model_id = "someone/tiny-constrained"  # as init_hf_repo would set it (no Hub here)
    trainer.push_to_hub()
    assert "constraints.json" in uploaded and "## Constraints" in uploaded["README.md"]
    assert "model_name: tiny-constrained" not in uploaded["README.md"]  # the output folder names the model


def test_push_to_hub_after_a_run_without_it_creates_the_repository_as_asked(make_trainer, monkeypatch):
    """A run trained without `push_to_hub`, pushed afterwards: transformers creates the repository through
    `init_hf_repo(token=, private=)`, which the trainer's hook must take (a TypeError on `private` before)."""
    import types

    import transformers.trainer as hf_trainer

    asked = {}

    class Api:
        def create_repo(self, repo_id, **kwargs):
            asked.update(kwargs, repo_id=repo_id)
            return types.SimpleNamespace(repo_id=f"me/{repo_id}")

        def upload_folder(self, **kwargs):
            asked["uploaded"] = True

    monkeypatch.setattr(hf_trainer, "hf_api", lambda: Api())
    trainer = make_trainer(max_steps=1)
    trainer.push_to_hub(private=True)
    assert asked == {"repo_id": "out", "token": None, "private": True, "exist_ok": True, "uploaded": True}
    assert trainer.hub_model_id == "me/out"


def test_push_to_hub_to_a_hub_out_of_reach_is_refused_before_training(make_trainer, tmp_path, monkeypatch):
    """The Hub online but unreachable when the trainer creates the repository: one line naming `push_to_hub`, and
    nothing trains (the offline case is refused at config time: the bad-input matrix)."""
    import huggingface_hub
    import pytest

    def unreachable(*args, **kwargs):
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # online, as far as the config can tell
    monkeypatch.setattr(huggingface_hub, "create_repo", unreachable)
    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", unreachable)
    with pytest.raises(
        ValueError, match=r"`push_to_hub`: the Hub repository 'me/tiny' cannot be created \(Connection"
    ):
        make_trainer(max_steps=2, push_to_hub=True, hub_model_id="me/tiny")
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_a_classifier_run_and_its_checkpoint_carry_the_card(tmp_path):
    """`ConstrainedTrainer` (transformers' Trainer writes no card of its own during training) gets the same card."""
    import transformers

    from constrained_sft import ConstrainedConfig, ConstrainedTrainer
    from constrained_sft.testing import presence_dataset, tiny_encoder, tiny_tokenizer

    args = ConstrainedConfig(output_dir=str(tmp_path / "clf"), report_to="none", use_cpu=True, max_steps=2,
                             save_strategy="steps", save_steps=2, per_device_train_batch_size=8, disable_tqdm=True)  # fmt: skip
    trainer = ConstrainedTrainer(model=tiny_encoder(), args=args, train_dataset=presence_dataset(32),
                                 data_collator=transformers.DataCollatorWithPadding(tiny_tokenizer()))  # fmt: skip
    trainer.train()
    for folder in (tmp_path / "clf", tmp_path / "clf" / "checkpoint-2"):
        card = ModelCard.load(folder / "README.md")
        assert "constrained-sft" in card.data.tags and "## Constraints" in card.text
        assert "| optimizer steps | 2 |" in card.text
