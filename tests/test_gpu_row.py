"""`benchmarks/gpu_row.py`, which recomputes the README's GPU row from the H100 window's archive: on a tiny study of
the archive's shape (three arms' run records and answers), unpacked by the checked extraction, each arm's held-out
figures are its run records' and the verdicts are `eval alpaca`'s own (the offline test judge here, proxy for the
README)."""

import json
import sys
import tarfile
from pathlib import Path

import pytest

from constrained_sft.cli import main as cli
from constrained_sft.evaluation.alpaca.generate import GenerateArguments
from constrained_sft.evaluation.alpaca.generate import run as generate
from constrained_sft.testing import SYMBOLS, tiny_causal_lm, tiny_tokenizer

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import gpu_row  # noqa: E402 (the scripts' side: benchmarks/, which the library never imports)

pytest.importorskip("alpaca_eval")


def a_window(root: Path) -> Path:
    """SHARED_DIR as the window left it: study-partial.tar.gz of a study with three arms' records and answers."""
    study = root / "study"
    rows = root / "instructions.jsonl"
    rows.write_text("".join(json.dumps({"instruction": " ".join(SYMBOLS[i : i + 3])}) + "\n" for i in range(6)))
    for seed, arm in enumerate(gpu_row.ARMS):
        model = root / "models" / arm
        tiny_causal_lm("llama", seed=seed).save_pretrained(model)
        tiny_tokenizer().save_pretrained(model)
        generate(GenerateArguments(model=str(model), name=f"{arm}-seed0", instructions=str(rows), gammas=[0.0, 1.5],
                                   output_dir=str(study / "generations"), batch_size=3, max_new_tokens=4))  # fmt: skip
        run = study / "train" / arm / "seed0"
        run.mkdir(parents=True)
        evaluation = {"step": 3, "eval_mean_token_accuracy": 0.5 + seed / 10, "eval_loss": 1.0 + seed,
                      "eval_descent_fraction": 0.9, "eval_feasible_fraction": 1.0}  # fmt: skip
        (run / "trainer_state.json").write_text(json.dumps({"log_history": [{"loss": 2.0, "step": 3}, evaluation]}))
        report = {"constraints": arm != "erm", "feasible": seed == 0, "feasible_by": "relaxed",
                  "holds": {"3": True, "6": seed == 0}}  # fmt: skip
        (run / "constraints.json").write_text(json.dumps(report))
    (study / "written_by.json").write_text(json.dumps({"commands": {"study": {"settings": {"seeds": 1}}}}))
    shared = root / "shared"
    shared.mkdir()
    with tarfile.open(shared / gpu_row.ARCHIVE, "w:gz") as tar:
        tar.add(study, arcname=".")
    return shared


def test_the_row_is_the_run_records_and_eval_alpacas_verdicts(tmp_path):
    shared = a_window(tmp_path)
    out = tmp_path / "row.json"
    assert gpu_row.main([str(shared), str(out), "--judge", "test"]) == 0
    row = json.loads(out.read_text())
    assert row["provenance"]["seeds"] == 1 and row["instructions"] == 6 and row["judge"] == "test"
    erm = row["arms"]["erm"]
    assert (erm["mean_token_accuracy"], erm["loss"], erm["layers_holding"], erm["layers"]) == (0.6, 2.0, 1, 2)
    assert row["arms"]["constrained"]["feasible"] is True and row["arms"]["constrained"]["constrained"] is True
    judged = tmp_path / "judged"
    assert cli(["eval", "alpaca", "--generations", str(tmp_path / "study" / "generations"), "--output_dir",
                str(judged), "--model", "constrained-seed0", "--reference", "erm-seed0", "--judge", "test", "--allow_empty_outputs",
                "true"]) == 0  # fmt: skip
    levels = json.loads((judged / "alpaca_eval.json").read_text())["levels"]
    shown = row["head_to_head"]["constrained vs erm"]
    assert [(lv["gamma"], lv["win_rate"], lv["low"], lv["high"]) for lv in levels] == [
        (lv["gamma"], lv["win_rate"], lv["low"], lv["high"]) for lv in shown
    ]
    assert set(row["head_to_head"]) == {"constrained vs erm", "penalty vs erm", "constrained vs penalty"}


def test_a_folder_without_the_archive_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        gpu_row.main([str(tmp_path), str(tmp_path / "row.json")])
    assert f"SHARED_DIR {tmp_path} holds no study-partial.tar.gz" in capsys.readouterr().err
    assert not (tmp_path / "row.json").exists()
