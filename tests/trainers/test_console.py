"""The console: one line per logging step, one table row per noise level at evaluation, every metric still logged."""

import logging

from constrained_sft.constraints.feasibility import FeasibilityReport, verdict_message
from constrained_sft.trainers.console import CompactConsole, eval_rows, train_line

TRAIN = {
    "loss": 2.5, "grad_norm": 1.0, "learning_rate": 2e-5, "descent_fraction": 0.9, "feasible_fraction": 0.5,
    **{f"layer_loss/{layer}": 3.0 - 0.1 * layer for layer in range(1, 31)},
    **{f"slack/{layer}": 0.01 for layer in range(2, 31)},
    **{f"dual/{layer}": 0.001 * layer for layer in range(2, 31)}, "epoch": 0.5,
}  # fmt: skip


def test_a_training_log_is_one_line():
    line = train_line({**TRAIN, "dual/7": 0.9}, step=40, max_steps=300, seconds_per_step=1.84)
    assert line == (
        "step 40/300 | loss 2.5 | f_L 0 | feasible 0.50 | descent 0.90 | max lambda 0.9 (layer 7) | lr 2.00e-05 | "
        "1.84 s/step"
    )
    assert "\n" not in line and len(line) < 120


def test_an_evaluation_is_a_table_row_per_level():
    logs = {"eval_loss": 2.0, "eval_mean_token_accuracy": 0.5, "eval_layer_loss/4": 2.0, "eval_descent_fraction": 1}
    assert eval_rows(logs) == [("eval", "clean", ["2", "0.5", "2", "1", "-"])]
    noisy = {"eval_gamma_1.5_loss": 2.5, "eval_gamma_1.5_accuracy": 0.4}
    assert eval_rows(noisy) == [("eval", "gamma 1.5", ["2.5", "0.4", "-", "-", "-"])]
    lines = CompactConsole().lines(logs, step=50, max_steps=300)
    assert lines[0].startswith("eval @ step 50") and "accuracy" in lines[0] and lines[1].startswith("  clean")


def test_the_trainer_prints_compact_lines_and_logs_every_metric(make_trainer, capsys):
    trainer = make_trainer(max_steps=3, dual_lr=0.5)
    trainer.train()
    printed = capsys.readouterr().out.strip().splitlines()
    steps = [line for line in printed if line.startswith("step ")]
    assert [line.split(" | ")[0] for line in steps] == ["step 1/3", "step 2/3", "step 3/3"]
    assert not any(line.startswith("{") for line in printed)  # no dict of every metric on the console
    assert all(f"dual/{layer}" in trainer.state.log_history[0] for layer in (2, 3, 4))  # still every metric
    full = make_trainer(max_steps=1, console_format="full", output_dir=str(trainer.args.output_dir) + "-full")
    full.train()
    assert capsys.readouterr().out.lstrip().startswith("{")


def test_the_infeasibility_warning_names_constraints_then_slack_then_what_to_change():
    report = FeasibilityReport(
        constraints=True, layers=[1, 2, 3, 4], feasible=False, feasible_by="strict", window_steps=[81, 100],
        holds={"2": True, "3": False, "4": False}, slack={"2": -0.1, "3": 0.25, "4": 0.5},
        dual={"2": 0.0, "3": 1.0, "4": 2.0},
    )  # fmt: skip
    level, text = verdict_message(report)
    assert level == logging.WARNING
    names, slack, change = text.index("layer 3"), text.index("+0.25"), text.index("To change:")
    assert names < slack < change and "+0.5" in text and "2:" not in text
