"""Where jobs run (`constrained_sft.launch`): what each launcher can do as data, refused in one line naming the
launcher; the pool runs calls side by side and raises a call's own error; the study's one schedule
(`study.policy.run_all`) on a launcher that starts every job at once, follows them or not, and hears of a job that
ended without its result. The launchers on real work: the study and sweep tests (`test_study*.py`, on a one-node
Slurm in `test_study_slurm.py`, `sweep/test_postgres.py`)."""

import os
from dataclasses import dataclass, field
from multiprocessing import get_context

import pytest

from constrained_sft.comparison import RunKey
from constrained_sft.launch import Call, JobEnded
from constrained_sft.launch.devices import Machine
from constrained_sft.launch.local import HERE, DevicePool, InProcess, pool_capabilities
from constrained_sft.launch.slurm import capabilities as slurm_capabilities
from constrained_sft.study.phases import Job
from constrained_sft.study.policy import run_all
from constrained_sft.study.record import EXITS, TRAIN, RunRecord
from constrained_sft.study.study_folder import StudyFolder
from constrained_sft.utils.slurm_options import SlurmArguments


def test_what_a_launcher_cannot_do_is_refused_in_one_line_naming_it():
    slurm = slurm_capabilities(SlurmArguments(launcher="slurm"), "run")
    for asked in ({"jobs": 2}, {"time_budget": True}, {"processes": 2}):
        with pytest.raises(ValueError) as refused:
            slurm.check(**asked)
        assert str(refused.value) == (
            "`--launcher slurm` submits every run as its own Slurm job (the cluster decides how many run at once): "
            "leave out `--jobs`, `--time_budget` and `accelerate launch`."
        )
    slurm.check()  # one run per job, no budget, one process: what it does
    with pytest.raises(ValueError, match=r"^`--jobs` 2 runs single-process calls side by side: leave out `accel"):
        pool_capabilities(2).check(jobs=2, time_budget=True, processes=2)
    HERE.check(time_budget=True, processes=4)  # in process: every process of a launch runs every call
    assert (slurm.at_once, slurm.detached, HERE.at_once, HERE.detached) == (None, True, 1, False)
    assert not slurm_capabilities(SlurmArguments(launcher="slurm", wait=False), "run").follows


def fails(text: str) -> int:
    return int(text)


def together(barrier) -> int:
    barrier.wait(timeout=120)  # both calls at once: each in a worker of its own
    return os.getpid()


def after(barrier) -> int:
    barrier.wait(timeout=120)  # held until the test has cancelled what waits behind it
    return os.getpid()


def test_the_pool_runs_calls_side_by_side_and_raises_a_calls_own_error():
    pool, manager = DevicePool(Machine(()), 2), get_context("spawn").Manager()
    try:
        barrier = manager.Barrier(2)
        handles = pool.submit([Call("a", together, (barrier,)), Call("b", together, (barrier,))])
        left, pids = list(handles), set()
        while left:
            for done in pool.wait(left):
                left.remove(done)
                pids.add(done.result())
        assert len(pids) == 2 and os.getpid() not in pids  # two workers, neither this process
        [bad] = pool.submit([Call("c", fails, ("x",))])
        pool.wait([bad])
        with pytest.raises(ValueError, match="invalid literal"):
            bad.result()
        # both workers held; the pool hands at most 2 + 1 more calls to its call queue (`EXTRA_QUEUED_CALLS`), where
        # they can no longer be cancelled; so of 2 held + 3 queued + 1 more, the last surely waits in the pool
        hold = manager.Barrier(3)
        calls = [Call("busy0", after, (hold,)), Call("busy1", after, (hold,))]
        calls += [Call(f"queued{i}", os.getpid) for i in range(3)]
        busy = pool.submit([*calls, Call("late", os.getpid)])
        pool.cancel(busy[5:])
        hold.wait(timeout=120)
        with pytest.raises(JobEnded, match="cancelled before it started"):
            busy[5].result()
        left = busy[:5]
        while left:
            for done in pool.wait(left):
                left.remove(done)
                assert done.result() in pids  # ran on, in the pool's two workers
    finally:
        pool.close()
        manager.shutdown()
    assert isinstance(pool.at_most(1), InProcess) and pool.at_most(5) is pool


@dataclass
class Cluster:
    """A launcher that starts every job at once and ends them in the order given (`ending`), one per wait; jobs named
    in `lost` end without their result."""

    ending: list[str]
    follows: bool = True
    lost: tuple[str, ...] = ()
    submitted: list[list[str]] = field(default_factory=list)
    closed: bool = False

    @property
    def capabilities(self):
        return slurm_capabilities(SlurmArguments(launcher="slurm", wait=self.follows), "run")

    def sharing(self, jobs):
        return 1

    def at_most(self, jobs):
        return self

    def describe(self, jobs):
        return ""

    def submit(self, calls):
        self.submitted.append([c.name for c in calls])
        return [Ended(c.name, c.name in self.lost) for c in calls]

    def wait(self, handles):
        if not self.follows:
            return []
        name = next(n for n in self.ending if any(h.name == n for h in handles))
        self.ending.remove(name)
        return [h for h in handles if h.name == name]

    def close(self):
        self.closed = True


@dataclass
class Ended:
    name: str
    lost: bool
    job_id: str = "1"

    def result(self):
        if self.lost:
            raise JobEnded(f"job {self.job_id} CANCELLED (log: x)")
        return RunRecord(self.name)


@dataclass
class Books:
    """The study's side (`conduct.Bookkeeper`): `whole` names runs whose record holds their phases although their
    job ended without a result (killed as it exited)."""

    whole: tuple[str, ...] = ()
    finished: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)

    def call(self, job):
        return Call(job.run.name, print, (job.run.name,))

    def done(self, job, record):
        self.finished.append(job.run.name)

    def ended(self, job, why):
        if job.run.name in self.whole:
            return RunRecord(job.run.name)
        self.partial.append(job.run.name)
        return None


def jobs(tmp_path, *runs, phases=(TRAIN,)):
    folder = StudyFolder(str(tmp_path))
    return [Job(folder, "sft", RunKey(seed, arm), None, None, phases=phases) for seed, arm in runs]  # type: ignore[arg-type]


def test_calls_not_started_are_cancelled_and_running_ones_run_on(tmp_path, monkeypatch, capsys):
    here = InProcess()
    first, second = here.submit([Call("a", len, ("ab",)), Call("b", len, ("abc",))])
    assert here.wait([first, second]) == [first] and first.result() == 2
    here.cancel([first, second])  # `first` has run: its result stays
    assert here.wait([second]) == [second] and first.result() == 2
    with pytest.raises(JobEnded, match="cancelled before it started"):
        second.result()

    from constrained_sft.launch import slurm
    from constrained_sft.launch.slurm import SlurmHandle, SlurmLauncher
    from constrained_sft.utils.slurm import Cluster as SlurmCluster
    from constrained_sft.utils.slurm_ledger import Ledger

    asked = []
    monkeypatch.setattr(slurm, "run_slurm", lambda *cmd: asked.append(cmd) or "")
    ledger = Ledger(str(tmp_path / "slurm"), "--sweep_dir")
    launcher = SlurmLauncher(SlurmCluster(SlurmArguments(launcher="slurm"), "cpu", 1, False, 0), ledger, 0)
    launcher.cancel([SlurmHandle("worker-1", "41", ledger.logs), SlurmHandle("worker-2", "42", ledger.logs)])
    assert asked == [("scancel", "--state=PENDING", "41", "42")]  # Slurm's filter: a started job runs on
    assert "slurm: worker-1 (41), worker-2 (42) cancelled where still queued" in capsys.readouterr().out


def test_a_search_that_holds_its_trials_cancels_the_workers_not_started():
    from constrained_sft.sweep.cluster import follow

    cluster = Cluster(["worker-0", "worker-1", "worker-2"])
    cancelled = []
    cluster.cancel = lambda handles: cancelled.extend(h.name for h in handles)  # type: ignore[method-assign]
    handles = cluster.submit([Call(f"worker-{k}", print) for k in range(3)])
    searched = iter([False, True])  # the search holds its trials once worker-1 has ended
    assert follow(cluster, handles, enough=lambda: next(searched)) == []
    assert cancelled == ["worker-2"]


def test_one_schedule_on_a_launcher_that_starts_every_job_at_once(tmp_path):
    queue = jobs(tmp_path, (0, "constrained"), (0, "erm"), (1, "constrained"), (1, "erm"))
    ending = ["erm/seed1", "constrained/seed0", "erm/seed0", "constrained/seed1"]
    cluster, books = Cluster(ending, lost=("erm/seed0", "erm/seed1")), Books(whole=("erm/seed1",))
    out = run_all(queue, cluster, None, None, books)
    assert cluster.submitted == [["constrained/seed0", "erm/seed0", "constrained/seed1", "erm/seed1"]]  # at once
    assert books.finished == ["erm/seed1", "constrained/seed0", "constrained/seed1"]  # as they ended
    assert out.failed == ["erm/seed0: job 1 CANCELLED (log: x)"] and books.partial == ["erm/seed0"]
    assert out.left == [] and out.unfollowed == [] and cluster.closed

    exits = jobs(tmp_path, (0, "erm"), phases=(EXITS,))  # waits for its run's job (the study merges them there)
    out = run_all(jobs(tmp_path, (0, "erm")) + exits, Cluster([], follows=False), None, None, Books())
    assert [j.run.name for j in out.unfollowed] == ["erm/seed0"] and out.left == exits and out.failed == []
