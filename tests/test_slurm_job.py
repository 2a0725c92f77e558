"""What a Slurm job runs (`utils.slurm_job.Requeueable`), without Slurm: it loads light, so submitit's USR2 handler is
in before the call's heavy imports; a late warning after the work is done is ignored; a time-limit requeue is noted
for the next start. The whole cycle on a real cluster is `tests/test_study_slurm.py`'s."""

import importlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import submitit

from constrained_sft.utils.slurm_job import TIME_LIMIT, Requeueable, dump_call, requeued_for

LOAD = """
import sys, submitit
job = submitit.helpers.DelayedSubmission.load(sys.argv[1])  # what submitit's job process does first
print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
print(job.result())
print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
"""


def test_the_pickled_job_loads_without_the_calls_imports_which_come_when_it_runs(tmp_path):
    call = dump_call(str(tmp_path / "calls"), importlib.import_module, "constrained_sft.study.cluster")  # torch ...
    path = tmp_path / "submitted.pkl"
    submitit.helpers.DelayedSubmission(Requeueable(call)).dump(path)
    shown = subprocess.run([sys.executable, "-c", LOAD, str(path)], capture_output=True, text=True, check=True)
    loaded, result, ran = shown.stdout.splitlines()
    assert loaded == "[]", shown.stdout  # nothing heavy before submitit's handler goes in
    assert "constrained_sft.study.cluster" in result and ran == "['torch', 'transformers']"


def test_a_warning_after_the_work_is_ignored_and_a_time_limit_is_noted_for_the_next_start(tmp_path):
    note = str(tmp_path / "train" / "erm" / "seed0.requeued.json")  # its folder not made yet
    job = Requeueable(dump_call(str(tmp_path), len, [1, 2]), note)
    before = signal.getsignal(signal.SIGUSR2)
    try:
        assert job() == 2
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR2, before)
    assert requeued_for(note, "by Slurm") == "by Slurm"  # no note: requeued from outside
    again = job.checkpoint()
    assert json.loads(Path(note).read_text()) == {"why": TIME_LIMIT} and requeued_for(note, "by Slurm") == TIME_LIMIT
    assert again.function is job and again.args == () and again.result() == 2


def test_a_requeue_while_the_job_started_is_counted_its_reason_unknown():
    """A run's record notes one requeue per Slurm restart: a job requeued again while it started (before it noted the
    requeue before) leaves that restart's reason unknown, never a gap in the count."""
    from constrained_sft.study.cluster import UNNOTED, requeues_since

    noted = [{"why": "time limit", "restart": 1, "job": "7", "phase": "train"}]
    assert requeues_since(noted, "7", 1, lambda: "unused") == []
    added = requeues_since(noted, "7", 3, lambda: "time limit")
    assert [(r["restart"], r["why"]) for r in added] == [(2, UNNOTED), (3, "time limit")]
    assert [r["restart"] for r in requeues_since([], "8", 2, lambda: "x")] == [1, 2]  # another job of the run
