"""`--launcher slurm`'s checks before any submission, against a cluster whose answers the test gives (the real one is
`tests/test_study_slurm.py`'s): submitit or Slurm missing, an unknown partition or account, a folder the nodes cannot
see, options that apply only to Slurm; the time limits Slurm prints; Ctrl-C while following says what keeps running."""

import sys

import pytest

from constrained_sft.utils import slurm
from constrained_sft.utils.slurm import Cluster, SlurmArguments, check_cluster, minutes, node_local


class FakeSlurm:
    """Slurm's commands as a two-partition cluster with accounting answers them."""

    def __init__(self, nodes: int = 4, accounting: str = "accounting_storage/slurmdbd"):
        self.nodes, self.accounting, self.asked = nodes, accounting, []

    def __call__(self, *cmd: str) -> str:
        self.asked.append(cmd)
        if cmd[:2] == ("sinfo", "-h") and cmd[2] == "-o":
            return "cpu*\ngpu\n"
        if cmd[0] == "sinfo":
            return f"{self.nodes}|gpu:h100:8|2-00:00:00\n"
        if cmd[:2] == ("scontrol", "show"):
            return f"AccountingStorageType   = {self.accounting}\n"
        if cmd[0] == "sacctmgr":
            return "lab-a\nlab-b\n"
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
    assert check_cluster(on(slurm_time=30, slurm_partition="gpu"), SHARED, "--study_dir").time_limit == 30


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"slurm_partition": "h200"}, r"`--slurm_partition` 'h200' is not a partition of this cluster; it has \['cpu', 'gpu'\]"),
        ({"slurm_account": "lab-z"}, r"`--slurm_account` 'lab-z' is not one of \w+'s accounts on this cluster: \['lab-a', 'lab-b'\]"),
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
        ({"launcher": "slurm", "slurm_time": 0}, r"`--slurm_time` must be >= 1"),
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
    assert [minutes(t) for t in ("infinite", "30", "1:00:00", "2-00:00:00", "00:10:30")] == [0, 30, 60, 2880, 11]


def test_ctrl_c_while_following_says_which_jobs_keep_running(tmp_path, capsys):
    from constrained_sft.comparison import RunKey
    from constrained_sft.study.cluster import follow
    from constrained_sft.study.folder import StudyFolder
    from constrained_sft.study.phases import Job
    from constrained_sft.utils.slurm import Ledger

    class Interrupted(Cluster):
        def queued(self, ids):
            raise KeyboardInterrupt

    job = Job(StudyFolder(str(tmp_path)), "sft", RunKey(0, "erm"), None, None)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        follow(Interrupted(on(), "cpu", 1, False, 0), Ledger(SHARED, "--study_dir"),
               {"erm/seed0": (job, "4242")}, "accuracy", print, print)  # fmt: skip
    out = capsys.readouterr().out
    assert "the Slurm jobs keep running: erm/seed0 (4242). Cancel them with `scancel 4242`" in out
