"""`constrained-sft study --launcher slurm` on a real one-node Slurm cluster (the `slurm` fixture: Debian's slurm-wlm
and munge, started by the test): the tiny five-arm study gives the records and numbers of the same study run here;
two copies of the command at once submit each run once; a job cancelled with `scancel` is submitted again by the same
command, which redoes no recorded phase; a partition the cluster does not have is refused before any job."""

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import hang_limit
from test_study import RECIPE, study_argv
from test_study import assets as assets  # noqa: F401 (the module's fixture: tiny model, encoder, rows, recipes)

from constrained_sft.cli import main as cli
from constrained_sft.utils.slurm import ACTIVE, folder_tag

pytest.importorskip("alpaca_eval")

ARMS = {"early-exit": "early_exit", "neftune": "none"}  # beside constrained, erm and penalty: the five arms
NEFTUNE = "neftune_noise_alpha: 5.0\n"


def five_arms(root) -> list[str]:
    for name, kind in ARMS.items():
        text = RECIPE.format(model=root / "model", data=root / "rows.jsonl", constraints=kind, out=root / "run")
        (root / f"{name}.yaml").write_text(text + (NEFTUNE if name == "neftune" else ""))
    arms = {"penalty": "penalty", **{n: n for n in ARMS}}
    return [a for name, f in arms.items() for a in ("--arm", f"{name}={root / f}.yaml")]


def on_slurm(*extra: str) -> list[str]:
    return ["--launcher", "slurm", "--slurm_cpus", "1", *extra]


def close(a, b, path="") -> list[str]:
    """Where two JSON values differ beyond float32 rounding (a run on 1 core against one on 2 sums in another
    order): the paths, empty when they agree."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in close(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in close(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, (int, float)):
        return [] if b == pytest.approx(a, rel=1e-4, abs=1e-6) else [f"{path}: {a} vs {b}"]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


TIMED = ("study", "seconds", "estimates", "jobs", "path", "plain_seconds", "tokens_per_second",
         "plain_tokens_per_second", "speedup", "speedup_low", "speedup_high")  # fmt: skip


def untimed(value):
    """`value` without what depends on where and when it ran: wall times, speed-ups, paths, the study's id."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in TIMED}
    return [untimed(v) for v in value] if isinstance(value, list) else value


def results(folder) -> dict:
    """What a study concluded (`untimed`): every run's record, the comparisons and the head-to-head."""
    records = {}
    for path in sorted((folder / "runs").glob("*.json")):
        records[path.name] = untimed(json.loads(path.read_text()))
    study = json.loads((folder / "study.json").read_text())
    head = {k: study["head_to_head"][k] for k in ("levels", "judge_is_proxy")}
    return {"records": records, "robustness": study["robustness"]["comparisons"], "head_to_head": head}


def test_the_five_arm_study_on_slurm_gives_the_local_records(assets, tmp_path, slurm, capsys):  # noqa: F811
    arms = five_arms(assets)
    base = ("--training_seeds", "1", "--exit_prompts", "1", *arms)
    assert cli(study_argv(assets, tmp_path / "local", *base)) == 0
    started = time.monotonic()
    assert cli(study_argv(assets, tmp_path / "slurm", *base, *on_slurm())) == 0
    took = time.monotonic() - started
    printed = capsys.readouterr().out
    assert "slurm: 5 run(s) submitted to partition 'debug', 0 already queued or running" in printed
    local, remote = results(tmp_path / "local"), results(tmp_path / "slurm")
    assert len(remote["records"]) == 5
    assert close(local, remote) == [], "\n".join(close(local, remote))
    ledger = json.loads((tmp_path / "slurm" / "slurm" / "jobs.json").read_text())["jobs"]
    assert sorted(e["name"] for e in ledger) == sorted(f"{a}/seed0" for a in ("constrained", "erm", *ARMS, "penalty"))
    assert all(e["phases"] == ["train", "robustness", "answers", "exits"] for e in ledger)
    for entry in ledger:  # submitit's own files, under the study: the pickled call, the logs, the result
        assert (tmp_path / "slurm" / "slurm" / "logs" / entry["job_id"]).is_dir()
    print(f"five runs through Slurm: {took:.1f} s")  # the overhead figure of the guide comes from a benchmark

    # collected again: every run recorded, nothing submitted, the same numbers
    assert cli(study_argv(assets, tmp_path / "slurm", *base, *on_slurm())) == 0
    assert len(json.loads((tmp_path / "slurm" / "slurm" / "jobs.json").read_text())["jobs"]) == 5
    assert close(results(tmp_path / "slurm"), remote) == []


def command(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "constrained_sft", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for(condition, what: str, limit: float):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {limit:.0f} s: {what}")


def test_doubled_cancelled_and_continued_submissions_train_nothing_twice(assets, tmp_path, slurm):  # noqa: F811
    out = tmp_path / "study"
    argv = study_argv(assets, out, "--training_seeds", "1", "--exit_prompts", "0", "--max_steps", "1000", *on_slurm())
    copies = [command([*argv, "--wait", "false"]) for _ in range(2)]  # two copies at once
    for copy in copies:
        stdout, stderr = copy.communicate(timeout=hang_limit(30))
        assert copy.returncode == 0, stderr[-2000:]
    ledger = json.loads((out / "slurm" / "jobs.json").read_text())["jobs"]
    assert sorted(e["name"] for e in ledger) == ["constrained/seed0", "erm/seed0"]  # each run submitted once

    # the constrained run's job cancelled while it trains (its progress bar in its log, no phase recorded)
    job = next(e["job_id"] for e in ledger if e["name"] == "constrained/seed0")
    log = out / "slurm" / "logs" / job / f"{job}_0_log.err"
    wait_for(lambda: log.is_file() and "/1000 [" in log.read_text(), "the run's training starts", hang_limit(30))
    slurm.run("scancel", job)
    wait_for(lambda: slurm.states()[job][1] == "CANCELLED", "the job is cancelled", hang_limit(10))
    wait_for(lambda: not slurm.run("squeue", "-h", "-j", job), "the job leaves the queue", hang_limit(20))
    before = {p.name: json.loads(p.read_text())["seconds"] for p in (out / "runs").glob("*.json")}
    record = out / "runs" / "constrained-seed0.json"
    assert "train" not in before.get(record.name, {})  # cancelled in training

    # the same command: the cancelled run submitted again, the other followed; no recorded phase done again
    assert cli(argv) == 0
    ledger = json.loads((out / "slurm" / "jobs.json").read_text())["jobs"]
    assert sorted(e["name"] for e in ledger) == ["constrained/seed0", "constrained/seed0", "erm/seed0"]
    after = {p.name: json.loads(p.read_text())["seconds"] for p in (out / "runs").glob("*.json")}
    for name, phases in before.items():
        assert {k: after[name][k] for k in phases} == phases  # recorded before, untouched since
    assert set(after[record.name]) == {"train", "robustness", "answers"}
    assert ledger[-1]["name"] == "constrained/seed0" and ledger[-1]["phases"] == ["train", "robustness", "answers"]
    assert (out / "study.json").is_file()


@pytest.mark.parametrize(
    ("extra", "folder", "message"),
    [
        (("--slurm_partition", "gpu-h100"), "study", r"`--slurm_partition` 'gpu-h100' is not a partition of this cluster; it has"),
        (("--slurm_sbatch", "constraint=nope"), "study", r"`--launcher slurm`: Slurm would refuse every job of it: allocation failure: Invalid feature specification"),
        (("--slurm_mem_gb", "1e9"), "study", r"`--slurm_mem_gb` 1e\+09 GB: the largest node of partition 'debug' has 3.90625 GB"),
        (("--slurm_gpus", "1"), "study", r"`--slurm_gpus` 1: the largest node of partition 'debug' has 0 GPUs"),
        ((), "100%u", r"`--study_dir` \S+100%u: Slurm reads '%' in a job's log path as a pattern"),
    ],
)  # fmt: skip
def test_what_the_cluster_cannot_run_is_refused_before_any_job(assets, tmp_path, slurm, extra, folder, message):  # noqa: F811
    jobs = slurm.states()
    out = tmp_path / folder
    with pytest.raises(ValueError, match=message):
        cli(study_argv(assets, out, "--training_seeds", "1", *on_slurm(*extra)))
    assert slurm.states().keys() == jobs.keys() and not os.path.exists(out)  # no job (others' may change state)


def test_a_lost_or_edited_ledger_never_doubles_a_run_nor_follows_another_job(assets, tmp_path, slurm, capsys):  # noqa: F811
    """The queue is the truth: jobs.json deleted while the runs train, the same command submits nothing and
    records the jobs again from their comments; edited to name another job of the user's, that job is not followed
    and the run is not submitted twice; a folder where the file was is refused in one line."""
    out = tmp_path / "study"
    argv = study_argv(assets, out, "--training_seeds", "1", "--exit_prompts", "0", "--max_steps", "100000",
                      *on_slurm("--wait", "false"))  # fmt: skip
    ledger = out / "slurm" / "jobs.json"
    tag = folder_tag(str(out))

    def ours() -> dict[str, str]:
        return {i: name for i, (name, state) in slurm.states().items() if name.endswith(f".{tag}") and state in ACTIVE}

    other = slurm.run("sbatch", "--parsable", f"--output={tmp_path / 'sleep.out'}", "--wrap", "sleep 300").strip()
    try:
        assert cli(argv) == 0
        first = ours()
        assert sorted(first.values()) == [f"constrained-seed0.{tag}", f"erm-seed0.{tag}"]
        ledger.unlink()
        capsys.readouterr()
        assert cli(argv) == 0
        assert ours() == first  # nothing submitted again
        assert "did not record" in capsys.readouterr().out
        entries = json.loads(ledger.read_text())["jobs"]
        assert sorted(e["job_id"] for e in entries) == sorted(first)
        for entry in entries:  # edited: the constrained run's job is now the user's `sleep`
            entry["job_id"] = other if entry["name"] == "constrained/seed0" else entry["job_id"]
        ledger.write_text(json.dumps({"jobs": entries}))
        assert cli(argv) == 0
        assert ours() == first
        assert f"names job {other} for constrained/seed0, which the queue says is not this folder's" in (
            capsys.readouterr().out
        )
        assert slurm.states()[other][1] in ("RUNNING", "PENDING")  # left alone
        ledger.unlink()
        ledger.mkdir()
        with pytest.raises(ValueError, match=r"`--study_dir`: \S+jobs.json is not a file; move it away"):
            cli(argv)
        assert ours() == first
    finally:
        slurm.run("scancel", other, *ours())


def job_logs(logs) -> str:
    """The last lines of every job's error log, for a failure's message."""
    tails = [f"\n== {p}\n" + "\n".join(p.read_text().splitlines()[-15:]) for p in sorted(logs.glob("*/*_log.err"))]
    return "".join(tails)


REQUEUED = ("requeues",)  # what only a requeued run's record holds


@pytest.mark.cluster  # minutes of two jobs training beside it: `make test-cluster`, a CI step of its own
def test_a_run_past_its_time_limit_requeues_itself_and_a_preempted_one_loses_nothing(assets, tmp_path, slurm):  # noqa: F811
    """Both runs train for longer than a minute on a busy 2-core machine, past their one-minute `--slurm_time`: a job
    warned of it (USR2) saves a checkpoint at the end of its step, requeues itself and goes on. The ERM run's job is
    also warned by the test while it trains (`scancel --signal=USR2`, the signal Slurm sends near the limit, which a
    fast machine may finish before), and the constrained run's job is requeued by `scontrol requeue`, as a preemption
    is. Both end with the records of the same study run here, uninterrupted, and say how often and why they were
    requeued."""
    steps = ("--max_steps", "1500", "--exit_prompts", "0", "--training_seeds", "1")
    # a warning may come before a start has trained a step (Slurm's minute of resolution): requeues to spare
    argv = study_argv(assets, tmp_path / "slurm", *steps, *on_slurm("--slurm_time", "1", "--slurm_requeues", "40"))
    copy = command(argv)
    try:
        ledger = tmp_path / "slurm" / "slurm" / "jobs.json"
        wait_for(ledger.is_file, "the jobs are submitted", hang_limit(30))
        jobs = {e["name"]: e["job_id"] for e in json.loads(ledger.read_text())["jobs"]}

        def sent(name: str, *command: str):
            """Sends `command` to the run's job once it trains; refused while it waits to start again."""
            log = tmp_path / "slurm" / "slurm" / "logs" / jobs[name] / f"{jobs[name]}_0_log.err"

            def attempt() -> bool:
                if not (log.is_file() and "/1500 [" in log.read_text()) or slurm.states()[jobs[name]][1] != "RUNNING":
                    return False
                left = slurm.seconds_left(jobs[name])  # Slurm itself warns 15 s or more ahead; the test's warning in
                if left is not None and left < 30:  # a job's last seconds would race the limit's kill: after a restart
                    return False
                done = subprocess.run([*command, jobs[name]], env=slurm.env, capture_output=True, check=False)
                return done.returncode == 0

            return attempt

        wait_for(sent("erm/seed0", "scancel", "--signal=USR2"), "the ERM run warned while it trains", hang_limit(120))
        wait_for(sent("constrained/seed0", "scontrol", "requeue"), "the constrained run requeued", hang_limit(120))
        assert cli(study_argv(assets, tmp_path / "local", *steps)) == 0  # the uninterrupted twin, meanwhile
        stdout, stderr = copy.communicate(timeout=hang_limit(600))
        assert copy.returncode == 0, stderr[-3000:] + job_logs(tmp_path / "slurm" / "slurm" / "logs")
    finally:
        if copy.poll() is None:
            copy.kill()
    local, remote = results(tmp_path / "local"), results(tmp_path / "slurm")
    requeues = {name: r.pop("requeues", []) for name, r in remote["records"].items()}
    assert close(local, remote) == [], "\n".join(close(local, remote))
    whys = {name: [r["why"] for r in found] for name, found in requeues.items()}
    assert "time limit" in whys["erm-seed0.json"], whys
    assert any(w.startswith("requeued by Slurm") for w in whys["constrained-seed0.json"]), whys
    assert [r["restart"] for r in requeues["constrained-seed0.json"]] == list(
        range(1, 1 + len(whys["constrained-seed0.json"]))
    )
    report = (tmp_path / "slurm" / "report.md").read_text()
    assert "Slurm jobs requeued" in report and "time limit" in report
    print(f"requeues: {whys}")


def test_cancel_stops_the_jobs_still_queued_and_leaves_a_running_one(tmp_path, slurm):  # noqa: F811
    """`SlurmLauncher.cancel` (a sweep whose search holds its trials cancels the workers not started): Slurm's own
    `scancel --state=PENDING` filter, on jobs that each take the whole node: the one running runs on."""
    from constrained_sft.launch.slurm import SlurmHandle, SlurmLauncher
    from constrained_sft.utils.slurm import Cluster
    from constrained_sft.utils.slurm_ledger import Ledger
    from constrained_sft.utils.slurm_options import SlurmArguments

    cores = slurm.run("sinfo", "-h", "-o", "%c").split()[0].rstrip("+")
    wrap = ["sbatch", "--parsable", f"--cpus-per-task={cores}", f"--output={tmp_path}/%j.out", "--wrap", "sleep 120"]
    ids = [slurm.run(*wrap).strip()]
    try:
        wait_for(lambda: slurm.states()[ids[0]][1] == "RUNNING", "the first job runs", hang_limit(30))
        ids += [slurm.run(*wrap).strip() for _ in range(2)]  # the node is full: they wait
        ledger = Ledger(str(tmp_path / "slurm"), "--sweep_dir")
        launcher = SlurmLauncher(Cluster(SlurmArguments(launcher="slurm"), "debug", 1, False, 0), ledger, 0)
        launcher.cancel([SlurmHandle(f"worker-{k}", i, ledger.logs) for k, i in enumerate(ids)])
        wait_for(lambda: [slurm.states()[i][1] for i in ids] == ["RUNNING", "CANCELLED", "CANCELLED"],
                 "the queued jobs cancelled, the running one running", hang_limit(20))  # fmt: skip
    finally:
        slurm.run("scancel", *ids, check=False)
