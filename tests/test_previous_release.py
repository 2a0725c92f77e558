"""What the previous release wrote continues on this one (`tests/fixtures/previous_release/`, written by a61a429 with
its `make.py`): its study takes more seeds (its marker migrated: a setting it recorded that decides nothing now, the
data's content recorded now after its runs' fingerprints vouch for it), its run resumes from its checkpoint, and its
model card, as that release wrote it, is this run's card again; a study whose data changed since is refused."""

import json
import shutil
from pathlib import Path

import pytest

from constrained_sft.cli import main as cli
from constrained_sft.testing import tiny_causal_lm, tiny_encoder, tiny_tokenizer

FIXTURE = Path(__file__).parent / "fixtures" / "previous_release"
STUDY = ["study", "--config", "descent.yaml", "--erm_config", "none.yaml", "--study_dir", "study", "--training_seeds",
         "2", "--bootstrap_samples", "50", "--generation_gammas", "0", "1.5", "--max_new_tokens", "4", "--judge",
         "proxy", "--judge_model", "encoder", "--exit_prompts", "1", "--keep_models", "none"]  # fmt: skip
pytest.importorskip("alpaca_eval")


@pytest.fixture
def previous(tmp_path, monkeypatch):
    """A copy of the fixture with the model and encoder make.py built (the same calls), as the working folder."""
    root = tmp_path / "previous"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("make.py"))
    tiny_causal_lm("llama", hidden=16, seed=1).save_pretrained(root / "model")
    tiny_tokenizer().save_pretrained(root / "model")
    tiny_encoder("bert", layers=2).save_pretrained(root / "encoder")
    tiny_tokenizer().save_pretrained(root / "encoder")
    monkeypatch.chdir(root)
    return root


def test_the_previous_releases_study_takes_more_seeds(previous, capsys):
    records = {p.name: p.read_text() for p in (previous / "study" / "runs").iterdir()}
    assert cli(STUDY) == 0
    printed = capsys.readouterr().out
    assert "written by an earlier version, continued; its settings migrated" in printed
    migrated = "(arms.*.data.evaluate_before_training no longer decide(s) the results; arms.*.data.files.dataset_name"
    assert migrated + " recorded now)" in printed
    assert "plan: 2 of 4 run(s) left (constrained/seed1, erm/seed1)" in printed
    for name, text in records.items():  # the earlier runs kept, as recorded
        assert (previous / "study" / "runs" / name).read_text() == text
    study = json.loads((previous / "study" / "study.json").read_text())
    assert study["robustness"]["arms"]["erm"] == ["erm/seed0", "erm/seed1"]
    marker = json.loads((previous / "study" / ".written-by.json").read_text())["commands"]["study"]["settings"]
    assert marker["arms"]["erm"]["data"]["files"]["dataset_name"].startswith("sha256:")


def test_the_previous_releases_study_refuses_changed_data(previous, capsys):
    """A same-size edit of the data: its runs' fingerprint (the earlier version's, which reads a small file whole)
    no longer matches; nothing is trained or written."""
    rows = previous / "rows.jsonl"
    text = rows.read_text()
    middle = text.index("s1", len(text) // 2)
    rows.write_text(text[:middle] + "s2" + text[middle + 2 :])
    before = sorted(p.relative_to(previous) for p in (previous / "study").rglob("*"))
    with pytest.raises(ValueError, match=r"--study_dir` study: its run train/\w+/seed0 trained on 'rows.jsonl' as it "
                                         r"was then \(an earlier version's fingerprint"):  # fmt: skip
        cli(STUDY)
    assert sorted(p.relative_to(previous) for p in (previous / "study").rglob("*")) == before


def test_the_previous_releases_run_resumes_and_its_card_is_the_runs_again(previous, caplog):
    run = previous / "run"
    assert (run / "README.md").read_bytes() == (run / "checkpoint-2" / "README.md").read_bytes()
    argv = ["train", "--config", "descent.yaml", "--output_dir", "run", "--max_steps", "6", "--save_strategy", "steps",
            "--save_steps", "2", "--disable_tqdm", "true"]  # fmt: skip
    assert cli(argv) == 0
    card = (run / "README.md").read_text()
    assert "| optimizer steps | 6 |" in card and not (run / "MODEL_CARD.md").exists()
    written = json.loads((run / ".written-by.json").read_text())
    assert list(written["files"]) == ["README.md"]
    state = json.loads((run / "trainer_state.json").read_text())
    assert state["global_step"] == 6 and "Resuming from run/checkpoint-2 (optimizer step 2)." in caplog.text
    identity = json.loads((run / "run.json").read_text())
    assert identity["data"]["files"]["dataset_name"].startswith("sha256:")  # written by this version now
