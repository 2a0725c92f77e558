"""A study in a short window (one borrowed GPU for minutes): `--jobs N` runs equal `--jobs 1`'s, a study whose
weights are gone continues and reports from its records alone, `--time_budget` plans, starts only what fits and the
next call continues, and a run that fails half way costs only itself."""

import json

import pytest
from conftest import hang_limit
from test_study import assets, study_argv  # noqa: F401 - the fixture and argv of the study's own tests

from constrained_sft.cli import main as cli

pytest.importorskip("alpaca_eval")

FAST = ("--exit_prompts", "0", "--bootstrap_samples", "200")


def records(study) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((study / "runs").glob("*.json"))}


def test_two_jobs_give_the_runs_of_one_job(assets, tmp_path):  # noqa: F811
    """The same seeds trained and measured in two worker processes at once, or one after the other here: every
    run's training log and held-out measurements agree (up to float32 arithmetic)."""
    one, two = tmp_path / "one", tmp_path / "two"
    assert cli(study_argv(assets, one, *FAST)) == 0
    assert cli(study_argv(assets, two, *FAST, "--jobs", "2")) == 0
    a, b = records(one), records(two)
    assert set(a) == set(b) == {f"{arm}-seed{s}" for arm in ("constrained", "erm") for s in (0, 1)}
    for name in a:
        left, right = a[name]["robustness"]["summary"], b[name]["robustness"]["summary"]
        assert left["auc"] == pytest.approx(right["auc"], rel=1e-5, abs=1e-6), name
        for x, y in zip(left["levels"], right["levels"], strict=True):
            assert x["accuracy_mean"] == pytest.approx(y["accuracy_mean"], rel=1e-5, abs=1e-6), name
            assert x["loss_mean"] == pytest.approx(y["loss_mean"], rel=1e-5), name
        arm, seed = name.rsplit("-seed", 1)
        logs = [json.loads((d / "train" / arm / f"seed{seed}" / "trainer_state.json").read_text()) for d in (one, two)]
        losses = [[h[k] for h in log["log_history"] for k in ("train_loss", "eval_loss") if k in h] for log in logs]
        assert losses[0] == pytest.approx(losses[1], rel=1e-5) and len(losses[0]) == 2, name
    study = [json.loads((d / "study.json").read_text())["robustness"]["comparisons"] for d in (one, two)]
    auc = [s["constrained - erm"]["auc"]["difference"]["estimate"] for s in study]
    assert auc[0] == pytest.approx(auc[1], rel=1e-4, abs=1e-6)


def test_a_study_without_its_weights_continues_and_reports_the_same(assets, tmp_path, monkeypatch):  # noqa: F811
    """`--keep_models seed0` deletes seed 1's weights once its results are recorded; then every weight file is
    deleted by hand, and the same command continues: nothing trains or measures again, the report is the same."""
    out = tmp_path / "study"
    argv = study_argv(assets, out, *FAST, "--keep_models", "seed0")
    assert cli(argv) == 0
    weights = lambda arm, s: list((out / "train" / arm / f"seed{s}").glob("*.safetensors"))  # noqa: E731
    assert weights("constrained", 0) and weights("erm", 0) and not weights("constrained", 1) and not weights("erm", 1)
    assert (out / "train" / "erm" / "seed1" / "constraints.json").is_file()  # the run's report and log stay
    first = json.loads((out / "study.json").read_text())
    for path in out.glob("train/*/seed*/*.safetensors"):
        path.unlink()

    from constrained_sft.evaluation.alpaca import generate
    from constrained_sft.evaluation.robustness import measure
    from constrained_sft.tasks import sft

    def refuse(*args, **kwargs):
        raise AssertionError("a recorded run was trained, measured or answered again")

    monkeypatch.setattr(sft.SFTTraining, "train", refuse)
    monkeypatch.setattr(measure, "evaluate_level", refuse)
    monkeypatch.setattr(generate, "generate_level", refuse)
    assert cli(argv) == 0
    again = json.loads((out / "study.json").read_text())
    assert again["robustness"]["comparisons"] == first["robustness"]["comparisons"]
    assert (
        again["summaries"] == first["summaries"] and again["head_to_head"]["levels"] == first["head_to_head"]["levels"]
    )


def test_a_time_budget_plans_starts_what_fits_and_the_next_call_continues(assets, tmp_path, monkeypatch, capsys):  # noqa: F811
    """Runs estimated at 40 s each (a clock that advances 40 s per run) in a 1.5-minute budget: the plan says 2 of 4
    fit, the two seed-0 runs run, the report covers seed 0 and names the runs left; the same command without a
    budget trains only those two and reports both seeds."""
    import importlib

    from constrained_sft.study import clock, cluster, schedule

    study_run = importlib.import_module("constrained_sft.study.conduct")

    now = {"t": 0.0}
    real_run_job = cluster.run_job  # what every launcher's job runs (`cluster.job_main`)

    def slow_run_job(job, callbacks=()):
        out = real_run_job(job, callbacks)
        now["t"] += 40.0
        return out

    monkeypatch.setattr(clock, "now", lambda: now["t"])
    monkeypatch.setattr(cluster, "run_job", slow_run_job)
    fixed = schedule.Estimate([], {"train": 20.0, "robustness": 10.0, "answers": 10.0}, "a test's fixed 40 s")
    monkeypatch.setattr(study_run, "estimate", lambda *a: fixed)
    out = tmp_path / "study"
    assert cli(study_argv(assets, out, *FAST, "--time_budget", "1.5")) == 0
    printed = capsys.readouterr().out
    assert "plan: 4 of 4 run(s) left" in printed and "budget: 1.5 min: 2 run(s) fit and start" in printed
    assert "not started (the time budget): constrained/seed1, erm/seed1" in printed
    assert set(records(out)) == {"constrained-seed0", "erm-seed0"}
    assert records(out)["erm-seed0"]["estimates"] == {"train": 20.0, "robustness": 10.0, "answers": 10.0}
    study = json.loads((out / "study.json").read_text())
    budget = study["settings"]["budget"]
    assert budget["training_seeds_per_arm"] == 1 and budget["runs_missing"] == ["constrained/seed1", "erm/seed1"]
    assert "Incomplete: 2 run(s) or phases not done yet" in (out / "report.md").read_text()
    done = {name: r["seconds"] for name, r in records(out).items()}

    monkeypatch.undo()
    assert cli(study_argv(assets, out, *FAST)) == 0
    printed = capsys.readouterr().out
    assert "plan: 2 of 4 run(s) left (constrained/seed1, erm/seed1)" in printed
    assert {name: r["seconds"] for name, r in records(out).items() if name in done} == done  # not run again
    study = json.loads((out / "study.json").read_text())
    assert (
        study["settings"]["budget"]["training_seeds_per_arm"] == 2
        and "runs_missing" not in study["settings"]["budget"]
    )
    assert study["robustness"]["arms"]["erm"] == ["erm/seed0", "erm/seed1"]


class FakeClock:
    """A clock that advances 1 s per reading, and 10 s per reading while `slow` readings are left: armed when
    training begins, the first steps read 10x slower than the rest (a GPU's warm-up)."""

    def __init__(self) -> None:
        self.t, self.slow = 0.0, 0

    def now(self) -> float:
        value = self.t
        self.t += 10.0 if self.slow else 1.0
        self.slow = max(self.slow - 1, 0)
        return value


def test_the_probe_leaves_out_warm_up_steps_and_the_plan_starts_what_fits(assets, tmp_path, monkeypatch, capsys):  # noqa: F811
    """A fake clock whose first 4 steps take 10 s and every later one 1 s: the probe prices a step at 1 s, so both
    runs fit in what the 3-minute budget leaves after the preparation and the probe (~70 s; the mean of all steps,
    4 s, would price a run at ~55 s and start one), and each run's record holds the estimate beside the measured
    seconds of every phase."""
    from constrained_sft.study import clock, probe

    fake = FakeClock()
    monkeypatch.setattr(clock, "now", fake.now)
    real_begin = probe.StepTimer.on_train_begin

    def armed(self, *args, **kwargs):
        real_begin(self, *args, **kwargs)
        fake.slow = 2 * probe.WARMUP_STEPS  # a reading at the start and at the end of each warm-up step

    monkeypatch.setattr(probe.StepTimer, "on_train_begin", armed)
    out = tmp_path / "study"
    argv = study_argv(assets, out, *FAST, "--max_steps", "12", "--training_seeds", "1", "--time_budget", "3")
    assert cli(argv) == 0
    printed = capsys.readouterr().out
    assert "1 s/step after warm-up (the first 4 steps took 10 s/step)" in printed, printed
    assert "budget: 3.0 min (" in printed and "left after" in printed and ": 2 run(s) fit and start" in printed, (
        printed
    )
    for record in records(out).values():
        assert set(record["seconds"]) == set(record["estimates"]) == {"train", "robustness", "answers"}
        assert record["estimates"]["train"] < 12 * 3.25  # warm steps priced, not the warm-up's


def test_a_budget_never_plans_zero_runs_when_one_fits():
    """Two runs at once would each take twice as long: in a budget one run alone fits and two side by side do not,
    the plan runs one at a time instead of none."""
    from constrained_sft.study.phases import Job
    from constrained_sft.study.record import RunKey
    from constrained_sft.study.schedule import Estimate, choose_jobs, fitting

    est = Estimate([], {"train": 60.0}, "a test")
    queue = [Job("s", "sft", RunKey(seed, arm), None, None) for seed in (0, 1) for arm in ("constrained", "erm")]
    assert fitting(queue, est, 2, 100.0) == []  # 2 at a time: 120 s each
    assert choose_jobs(queue, est, 2, 100.0) == 1 and len(fitting(queue, est, 1, 100.0)) == 1
    assert choose_jobs(queue, est, 2, 250.0) == 2 and len(fitting(queue, est, 2, 250.0)) == 4  # 2 x 120 s in 2 slots
    measured = Estimate([("erm", "train", 30.0, 2)], {}, "erm measured at 2 at a time")
    assert measured.phase("erm", "train", 1) == 30.0 and measured.phase("erm", "train", 4) == 60.0
    assert measured.phase("constrained", "train", 2) == 30.0  # another arm: every arm's mean


def test_a_run_that_fails_half_way_costs_only_itself(assets, tmp_path, monkeypatch):  # noqa: F811
    """The second run fails while it is measured (after it trained): the first run's record stands; the next call
    measures the second without training it again and trains only what is left."""
    from constrained_sft.study.after_training import Evaluation

    real = Evaluation.robustness

    def fail_on_erm(self, *args, **kwargs):
        if "erm/seed0" in args:  # the run's name
            raise RuntimeError("killed while measuring erm/seed0")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Evaluation, "robustness", fail_on_erm)
    out = tmp_path / "study"
    argv = study_argv(assets, out, *FAST, "--training_seeds", "1")
    with pytest.raises(RuntimeError, match="killed while measuring"):
        cli(argv)
    assert set(records(out)) == {"constrained-seed0", "erm-seed0"}
    assert set(records(out)["erm-seed0"]["seconds"]) == {"train"}  # its training recorded the moment it ended
    assert (out / "train" / "erm" / "seed0" / "model.safetensors").is_file()  # weights kept: phases are left
    monkeypatch.undo()
    from constrained_sft.tasks import sft

    monkeypatch.setattr(sft.SFTTraining, "train", lambda *a, **k: pytest.fail("a finished run trained again"))
    assert cli(argv) == 0
    assert set(records(out)) == {"constrained-seed0", "erm-seed0"}


def test_a_finished_study_trusts_only_its_own_records_and_keeps_only_what_it_is_told(assets, tmp_path, capsys):  # noqa: F811
    """On one finished study: a record of another run behind a run's file is refused in one line, every file kept; a
    budget in which no job can finish is refused in one line; `--keep_models none` on the finished runs deletes their
    weights and says so; a run that lost both its record and its weights trains again."""
    from constrained_sft.cli import console

    out = tmp_path / "study"
    argv = study_argv(assets, out, *FAST, "--training_seeds", "1")
    assert cli(argv) == 0
    erm = out / "runs" / "erm-seed0.json"
    kept = erm.read_bytes()
    erm.write_bytes((out / "runs" / "constrained-seed0.json").read_bytes())
    stamps = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert console(argv) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("constrained-sft: error:")]
    assert len(err) == 1 and "erm-seed0.json is the record of 'constrained/seed0', not of 'erm/seed0'" in err[0]
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == stamps
    erm.write_bytes(kept)

    capsys.readouterr()
    assert (
        console(study_argv(assets, tmp_path / "short", *FAST, "--training_seeds", "1", "--time_budget", "0.001")) == 2
    )
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("constrained-sft: error:")]
    assert len(err) == 1 and "`--time_budget` 0.001 min: no job can finish in it" in err[0]
    assert "give `--time_budget` >=" in err[0]

    assert cli([*argv, "--keep_models", "none"]) == 0
    assert (
        "constrained/seed0: every phase recorded; its weights deleted (`--keep_models none`)"
        in capsys.readouterr().out
    )
    assert not list(out.glob("train/*/seed0/*.safetensors"))

    erm.unlink()  # neither record nor weights: it trains again, and the study reports it
    assert cli([*argv, "--keep_models", "none"]) == 0
    assert "erm/seed0" in capsys.readouterr().out and erm.is_file()
    assert set(json.loads(erm.read_text())["seconds"]) == {"train", "robustness", "answers"}

    import shutil

    moved = tmp_path / "moved"  # a study carried elsewhere, one record lost: its answers, written where it was, redone
    shutil.copytree(out, moved)
    (moved / "runs" / "erm-seed0.json").unlink()
    assert cli(study_argv(assets, moved, *FAST, "--training_seeds", "1", "--keep_models", "none")) == 0
    assert (moved / "runs" / "erm-seed0.json").is_file() and (moved / "study.json").is_file()


def test_the_probes_figures_are_kept_for_the_next_call_on_the_device(assets, tmp_path, monkeypatch, capsys):  # noqa: F811
    """A budget too short for any run is refused after the probe; the probe's figures are kept (timings.json, with
    the device), so the next call on that device plans from them instead of spending its budget probing again."""
    from constrained_sft.study import clock, probe

    fake = FakeClock()
    monkeypatch.setattr(clock, "now", fake.now)
    out = tmp_path / "study"
    argv = study_argv(assets, out, *FAST, "--training_seeds", "1")
    with pytest.raises(ValueError, match="no job can finish in it"):
        cli([*argv, "--time_budget", "0.2"])
    kept = json.loads((out / "timings.json").read_text())["probe"]
    assert kept["device"] == probe.device_name() and kept["times"]["steps"]

    def no_probe(job):
        raise AssertionError("probed again")

    monkeypatch.setattr(probe, "probe", no_probe)
    assert cli([*argv, "--time_budget", "60"]) == 0
    assert "-step probe (" in capsys.readouterr().out
    assert set(records(out)) == {"constrained-seed0", "erm-seed0"}


def test_the_workers_end_with_a_study_killed_with_sigkill(assets, tmp_path):  # noqa: F811
    """`--jobs 2`: the study killed with SIGKILL (no clean-up runs) while its two workers train; within seconds no
    worker is left writing into its folder (`schedule.follow_parent`)."""
    import subprocess
    import sys
    import time

    import psutil

    out = tmp_path / "study"
    argv = study_argv(assets, out, *FAST, "--jobs", "2", "--training_seeds", "1", "--max_steps", "2000")
    program = "import sys; from constrained_sft.cli import console; sys.exit(console(sys.argv[1:]))"
    study = subprocess.Popen([sys.executable, "-c", program, *argv], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    deadline, workers = time.monotonic() + hang_limit(30), []
    while time.monotonic() < deadline and study.poll() is None:
        workers = [p for p in psutil.Process(study.pid).children() if "spawn_main" in " ".join(p.cmdline())]
        if len(workers) == 2 and len(list(out.glob("train/*/seed0"))) == 2:
            break
        time.sleep(0.2)
    assert len(workers) == 2 and study.poll() is None, "the two runs did not start"
    study.kill()
    study.wait()
    _, alive = psutil.wait_procs(workers, timeout=hang_limit(2))
    assert not alive, f"workers outlived the study: {[p.pid for p in alive]}"
