"""`--launcher slurm`'s checks before any submission, against a cluster whose answers the test gives (the real one is
`tests/test_study_slurm.py`'s): submitit or Slurm missing, an unknown partition or account, a folder the nodes cannot
see, options that apply only to Slurm; the time limits Slurm prints; Ctrl-C while following says what keeps running."""

import os
import sys

import pytest

from constrained_sft.utils import slurm
from constrained_sft.utils.slurm import (
    Cluster,
    SlurmArguments,
    StoppedFollowing,
    check_cluster,
    folder_tag,
    gpus_of,
    minutes,
    node_local,
)
from constrained_sft.utils.slurm_ledger import Ledger


class FakeSlurm:
    """Slurm's commands as a two-partition cluster with accounting answers them."""

    def __init__(self, nodes: int = 4, accounting: str = "accounting_storage/slurmdbd"):
        self.nodes, self.accounting, self.asked = nodes, accounting, []
        self.comments = ""  # squeue's "%i|%T|%k" lines

    def __call__(self, *cmd: str) -> str:
        self.asked.append(cmd)
        if cmd[:2] == ("sinfo", "-h") and cmd[2] == "-o":
            return "cpu*\ngpu\n"
        if cmd[0] == "sinfo":
            return f"{self.nodes}|gpu:h100:8(S:0-1)|2-00:00:00|64|512000\n"
        if cmd[:2] == ("scontrol", "show"):
            return f"AccountingStorageType   = {self.accounting}\n"
        if cmd[0] == "sacctmgr":
            return "lab-a\nlab-b\n"
        if cmd[0] == "squeue" and "%i|%T|%k" in cmd:  # the user's jobs with their comments
            return self.comments
        if cmd[0] == "squeue":  # every job of the user's the controller still knows
            return "12 RUNNING\n13 COMPLETED\n14 PENDING\n15 CANCELLED\n"
        raise AssertionError(cmd)


@pytest.fixture
def fake(monkeypatch):
    answers = FakeSlurm()
    monkeypatch.setattr(slurm, "run_slurm", answers)
    monkeypatch.setattr(slurm.shutil, "which", lambda name: f"/usr/bin/{name}")
    return answers


SHARED = "/shared/projects/study"  # a folder on a filesystem every node mounts (only its path is looked at)


def on(**kwargs) -> SlurmArguments:
    return SlurmArguments(launcher="slurm", **kwargs)


def test_the_cluster_as_found(fake, tmp_path):
    found = check_cluster(on(slurm_account="lab-b"), SHARED, "--study_dir")
    assert (found.partition, found.nodes, found.has_gpus, found.time_limit) == ("cpu", 4, True, 2880)
    assert found.gpus(2) == 2 and Cluster(on(slurm_gpus=0), "cpu", 1, True, 0).gpus(2) == 0
    assert found.gpus_per_node == 8
    warned = [Cluster(on(), "cpu", 1, False, limit).signal_delay for limit in (0, 1, 4, 6, 2880)]
    assert warned == [90, 15, 60, 90, 90]  # submitit's 90 s, a quarter of a limit under 6 minutes
    assert on().requeues == 3 and on(slurm_requeues=0).requeues == 0
    assert check_cluster(on(slurm_time="30", slurm_partition="gpu"), SHARED, "--study_dir").time_limit == 30
    assert check_cluster(on(slurm_time="1-00"), SHARED, "--study_dir").time_limit == 1440
    with pytest.raises(ValueError, match=r"`--gpus_per_run` 9: the largest node of partition 'cpu' has 8 GPUs"):
        found.gpus(9)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"slurm_partition": "h200"}, r"`--slurm_partition` 'h200' is not a partition of this cluster; it has \['cpu', 'gpu'\]"),
        ({"slurm_account": "lab-z"}, r"`--slurm_account` 'lab-z' is not one of \w+'s accounts on this cluster: \['lab-a', 'lab-b'\]"),
        ({"slurm_cpus": 1000000000}, r"`--slurm_cpus` 1e\+09: the largest node of partition 'cpu' has 64 CPU cores; a job asking more would wait in the queue for good"),
        ({"slurm_mem_gb": 1e9}, r"`--slurm_mem_gb` 1e\+09 GB: the largest node of partition 'cpu' has 500 GB"),
        ({"slurm_gpus": 1000000000}, r"`--slurm_gpus` 1e\+09: the largest node of partition 'cpu' has 8 GPUs"),
        ({"slurm_time": "3-00"}, r"`--slurm_time` 3-00: partition 'cpu' lets a job run 2880 minute\(s\) at most"),
    ],
)  # fmt: skip
def test_what_slurm_does_not_know_is_refused(fake, tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        check_cluster(on(**options), SHARED, "--study_dir")


def test_accounts_go_unchecked_where_slurm_keeps_no_accounting(fake, tmp_path):
    fake.accounting = "accounting_storage/none"
    check_cluster(on(slurm_account="anything"), SHARED, "--study_dir")
    assert not [c for c in fake.asked if c[0] == "sacctmgr"]


def test_a_folder_on_a_nodes_own_disk_is_refused_where_several_nodes_run_the_jobs(fake, tmp_path, monkeypatch):
    monkeypatch.delenv("TMPDIR", raising=False)
    with pytest.raises(
        ValueError, match=r"`--study_dir` /tmp/x is on a node's own disk .* partition 'cpu' has 4 nodes"
    ):
        check_cluster(on(), "/tmp/x", "--study_dir")
    fake.nodes = 1  # one node: its /tmp is the jobs' /tmp too
    check_cluster(on(), "/tmp/x", "--study_dir")
    assert node_local("/dev/shm/a") and not node_local("/home/u/study")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert node_local(str(tmp_path / "study"))


def test_submitit_or_slurm_missing(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "submitit", None)
    with pytest.raises(
        ValueError, match=r"needs submitit, which is not installed: pip install 'constrained-sft\[slurm\]'"
    ):
        check_cluster(on(), SHARED, "--study_dir")
    monkeypatch.undo()
    pytest.importorskip("submitit")
    monkeypatch.setattr(slurm.shutil, "which", lambda name: None if name == "sbatch" else f"/usr/bin/{name}")
    with pytest.raises(
        ValueError, match=r"Slurm's sbatch not found on PATH; run the command on a node of the cluster"
    ):
        check_cluster(on(), SHARED, "--study_dir")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"slurm_partition": "gpu"}, r"--slurm_partition apply to `--launcher slurm`; add it"),
        ({"launcher": "slurm", "slurm_sbatch": ["exclusive"]}, r"`--slurm_sbatch` 'exclusive': give KEY=VALUE"),
        ({"launcher": "slurm", "slurm_time": 0}, r"`--slurm_time` must be at least a minute, got '0'"),
        (
            {"launcher": "slurm", "slurm_time": "2h"},
            r"`--slurm_time` '2h': give one of Slurm's forms MM, MM:SS, HH:MM:SS",
        ),
        ({"launcher": "slurm", "slurm_time": "1:2:3:4"}, r"`--slurm_time` '1:2:3:4': give one of Slurm's forms"),
        (
            {"launcher": "slurm", "slurm_sbatch": ["partition=gone"]},
            r"'partition=gone': partition is set by this tool; use `--slurm_partition`",
        ),
        (
            {"launcher": "slurm", "slurm_sbatch": ["cpus-per-task=2"]},
            r"cpus-per-task is set by this tool; use `--slurm_cpus`",
        ),
        ({"launcher": "slurm", "slurm_sbatch": ["gres=gpu:2"]}, r"gres is set by this tool; use `--slurm_gpus`"),
        (
            {"launcher": "slurm", "slurm_sbatch": ["output=/x/%j.out"]},
            r"output is set by this tool \(each job logs under the folder's slurm/logs/<job id>/\)",
        ),
        (
            {"launcher": "slurm", "slurm_sbatch": ["wrap=sleep 1"]},
            r"wrap is set by this tool \(each job runs one call of this tool\)",
        ),
        ({"launcher": "slurm", "slurm_sbatch": ["job_name=x"]}, r"job-name is set by this tool"),
        ({"launcher": "slurm", "slurm_mem_gb": -1.0}, r"`--slurm_mem_gb` must be > 0"),
        ({"launcher": "slurm", "slurm_gpus": -1}, r"`--slurm_gpus` must be >= 0"),
        ({"launcher": "slurm", "slurm_cpus": 0}, r"`--slurm_cpus` must be >= 1"),
        ({"launcher": "pbs"}, r"`launcher` must be one of \['local', 'slurm'\], got 'pbs'"),
    ],
)
def test_bad_options_are_refused_as_they_are_read(options, message):
    with pytest.raises(ValueError, match=message):
        SlurmArguments(**options)


def test_the_queue_read_holds_the_active_jobs_asked_for(fake):
    """A job long gone from the controller (99: purged after MinJobAge) is not queued; `squeue -j 99` alone would
    have failed."""
    assert Cluster.queued(["12", "13", "15", "99"]) == {"12": "RUNNING"}
    assert Cluster.queued([]) == {} and [c for c in fake.asked if c[0] == "squeue"] == [fake.asked[-1]]
    assert "-j" not in fake.asked[-1]


def test_sbatch_options_and_time_limits():
    assert on(slurm_sbatch=["constraint=a100", "gres-flags=enforce-binding"]).sbatch_options() == {
        "constraint": "a100", "gres_flags": "enforce-binding"}  # fmt: skip
    forms = ("infinite", "30", "1:00:00", "2-00:00:00", "00:10:30", "10:30", "2-00", "1-02:30", "0:30")
    assert [minutes(t) for t in forms] == [0, 30, 60, 2880, 11, 11, 2880, 1590, 1]  # MM:SS, not HH:MM
    assert on(slurm_time="90").time_minutes() == 90 and on(slurm_time=90).slurm_time == "90"  # a YAML number
    assert [gpus_of(g) for g in ("(null)", "gpu:h100:8(S:0-1)", "gpu:4,shard:8", "gpu")] == [0, 8, 4, 1]


def test_ctrl_c_while_following_says_which_jobs_keep_running(tmp_path, capsys, monkeypatch):
    from constrained_sft.cli import console
    from constrained_sft.launch.slurm import SlurmHandle, SlurmLauncher

    pytest.importorskip("submitit")
    from constrained_sft.utils.slurm_watch import QueueJob

    def interrupted(self, force_check=False):
        raise KeyboardInterrupt

    monkeypatch.setattr(QueueJob, "done", interrupted)  # Ctrl-C while submitit looks at the job
    ledger = Ledger(str(tmp_path / "slurm"), "--study_dir")
    launcher = SlurmLauncher(Cluster(on(), "cpu", 1, False, 0), ledger, 0, "run")

    def following(argv):
        launcher.wait([SlurmHandle("erm/seed0", "4242", ledger.logs)])

    with pytest.raises(StoppedFollowing, match=r"the Slurm jobs keep running: erm/seed0 \(4242\). Cancel them"):
        following([])
    import constrained_sft.cli as cli

    monkeypatch.setattr(cli, "main", following)  # the command as a user runs it: one line, no trace, exit 130
    monkeypatch.delenv("CONSTRAINED_SFT_TRACEBACK", raising=False)
    assert console(["study"]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "constrained-sft: stopped following; the Slurm jobs keep running: erm/seed0 (4242). Cancel them with "
        "`scancel 4242`, or run the same command again to follow them and collect."
    ]


def test_a_folder_name_slurm_would_expand_is_refused(fake):
    with pytest.raises(ValueError, match=r"`--study_dir` /shared/100%u: Slurm reads '%' in a job's log path"):
        check_cluster(on(), "/shared/100%u", "--study_dir")


def test_the_queue_says_which_jobs_are_a_folders_and_repairs_its_ledger(fake, tmp_path, capsys):
    """The ledger deleted: the folder's jobs come back from their comments; edited to name another job of the
    user's: that job is not followed; another folder's jobs and ended jobs are not this folder's."""
    ledger = Ledger(str(tmp_path / "study" / "slurm"), "--study_dir")
    mine, other = ledger.tag, folder_tag(str(tmp_path / "elsewhere"))
    assert mine == folder_tag(str(tmp_path / "study" / "." ))  # fmt: skip
    fake.comments = (f"21|RUNNING|constrained-sft:{mine}:erm/seed0\n22|PENDING|constrained-sft:{mine}:constrained/seed0\n"
                     f"23|RUNNING|constrained-sft:{other}:erm/seed0\n24|COMPLETED|constrained-sft:{mine}:penalty/seed0\n"
                     "12|RUNNING|(null)\n")  # fmt: skip
    cluster = Cluster(on(), "cpu", 1, False, 0)
    assert cluster.ours(mine) == {"erm/seed0": ["21"], "constrained/seed0": ["22"]}
    with ledger.locked():  # as the commands call it
        assert ledger.active(cluster) == {"erm/seed0": "21", "constrained/seed0": "22"}  # no jobs.json at all
    assert ledger.last() == {"erm/seed0": "21", "constrained/seed0": "22"}  # recorded again
    assert "did not record erm/seed0 (21), constrained/seed0 (22): found in the queue" in capsys.readouterr().out
    ledger.add("penalty/seed0", "12")  # edited to name the user's own `sbatch --wrap` job, running
    assert ledger.active(cluster) == {"erm/seed0": "21", "constrained/seed0": "22"}
    assert "names job 12 for penalty/seed0, which the queue says is not this folder's" in capsys.readouterr().out
    os.remove(ledger.path)
    os.mkdir(ledger.path)  # a folder where the file was
    with pytest.raises(ValueError, match=r"`--study_dir`: .*jobs.json is not a file; move it away"):
        ledger.active(cluster)


def test_sbatchs_own_refusal_is_one_line_and_leaves_no_file(tmp_path, monkeypatch, capsys):
    """sbatch refusing at submission (a limit --test-only does not see, e.g. a per-user job cap): one line naming
    the job, nothing printed besides, none of submitit's files for a job that never was."""
    pytest.importorskip("submitit")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(
        "#!/bin/sh\ncat >&2 <<'MSG'\nsbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
        "(job submit limit, user's size and/or time limits)\nMSG\nexit 1\n"
    )
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    logs = tmp_path / "slurm" / "logs"
    with pytest.raises(ValueError) as refused:
        Cluster(on(), "cpu", 1, False, 0).submit(str(logs), "0123456789", "erm/seed0", 0, print, "x")
    assert str(refused.value) == (
        "`--launcher slurm`: sbatch refused erm/seed0's job: sbatch: error: Batch job submission failed: Job violates "
        "accounting/QOS policy (job submit limit, user's size and/or time limits)"
    )
    assert list(logs.iterdir()) == [] and capsys.readouterr().err == ""


def test_submitits_job_api_reads_the_queue_where_sacct_has_nothing(tmp_path, monkeypatch):
    """`QueueWatcher` (submitit's watcher, reading squeue): an active state submitit does not know is not done, a
    job gone from the queue has ended, PREEMPTED in the queue (not requeued) has ended."""
    pytest.importorskip("submitit")
    from constrained_sft.utils.slurm_watch import QueueWatcher

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(
        "#!/bin/sh\nprintf '1|RUNNING\\n2|CONFIGURING\\n3|COMPLETED\\n4|PREEMPTED\\n99|RUNNING\\n'\n"
    )
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    watcher = QueueWatcher(delay_s=30)
    for job_id in "12345":
        watcher.register_job(job_id)
    watcher.update()  # one squeue for every registered job
    assert [(watcher.get_state(i, mode="cache"), watcher.get_info(i, mode="cache")["SlurmState"]) for i in "12345"] == [
        ("RUNNING", "RUNNING"), ("RUNNING", "CONFIGURING"), ("COMPLETED", "COMPLETED"), ("ENDED", "PREEMPTED"),
        ("ENDED", "ENDED")]  # fmt: skip
    assert [watcher.is_done(i, mode="cache") for i in "12345"] == [False, False, True, True, True]


def test_a_failed_job_is_said_by_its_own_error_line(tmp_path):
    """`Cluster.ended`'s line names the error the call raised (its traceback's last line), not the log paths submitit
    appends: the message as the installed submitit writes it, from a job run by its local executor."""
    import submitit

    executor = submitit.LocalExecutor(folder=str(tmp_path))
    job = executor.submit(int, "seven")  # a call the job can import: it raises
    error = job.exception()
    assert error is not None and str(job.paths.stdout) in str(error)  # submitit's trailer: where the logs are
    assert slurm.error_line(error) == "ValueError: invalid literal for int() with base 10: 'seven'"
    assert slurm.error_line(RuntimeError("no output\n  (state: FAILED)")) == "(state: FAILED)"


def test_a_job_past_its_requeues_says_which_option_to_raise():
    """submitit ends a job warned once more after its requeues are spent with its own error: the line names it and
    what to raise."""
    from submitit.core.utils import UncompletedJobError

    error = UncompletedJobError("Job not requeued because: timed-out too many times.")
    line = slurm.why_ended("COMPLETING", error)
    assert line == (
        "COMPLETING: Job not requeued because: timed-out too many times. (raise `--slurm_time` or `--slurm_requeues`)"
    )
    assert slurm.why_ended("FAILED", None) == "FAILED"
