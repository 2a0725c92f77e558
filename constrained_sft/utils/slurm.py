"""
Jobs on a Slurm cluster through submitit (`--launcher slurm`): the study's runs and the sweep's workers. The cluster
asked before any submission (`check_cluster`: one line naming the field where a partition, an account, the
resources per job or the folder will not do), one submission (`Cluster.submit`: sbatch's own refusal in one line,
nothing left behind) and the queue (`Cluster.queued`, `Cluster.ours`). The options are `utils.slurm_options`'s, the
record of what was submitted `utils.slurm_ledger`'s.

submitit writes the sbatch script, pickles the call, keeps the logs and the result; no job script is written here.
What is written by hand is the queue's reading: submitit reads job states with `sacct`, which answers only where the
cluster keeps an accounting database (slurmdbd), and many do not; `squeue` answers on every cluster. A job the queue
no longer holds has ended, and what it left in the folder (a study's run records, a sweep's trials) says whether it
finished; submitit's result file, where there is one, says why it did not. Every job carries its folder's tag and
its name in its comment (`TAG`), so the queue itself says which jobs are a folder's, whatever its ledger says.
"""

from __future__ import annotations

import contextlib
import getpass
import io
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .slurm_ledger import Ledger, folder_tag
from .slurm_options import (
    ACTIVE,
    LAUNCHERS,
    SET_HERE,
    Launcher,
    SlurmArguments,
    check_resources,
    gpus_of,
    minutes,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LAUNCHERS", "SET_HERE", "Cluster", "Launcher", "Ledger", "SlurmArguments", "SlurmJobsError",
           "StoppedFollowing", "check_cluster", "folder_tag", "minutes"]  # fmt: skip


CALLS = "calls"  # logs/calls/: each job's call, loaded once the job's signal handler is in (`utils.slurm_job`)
TAG = "constrained-sft"  # a job's comment: "constrained-sft:<folder tag>:<name>"
SPENT = "timed-out too many times"  # submitit's word for a job warned once more after its requeues were spent
POLL = 1.0  # seconds between looks at the jobs (`QueueJob.done`: its result file; the queue at submitit's pace)
NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm")  # per-node folders on every cluster (and $TMPDIR where set)
INSTALL = "pip install 'constrained-sft[slurm]'"


class SlurmJobsError(ValueError):
    """Jobs that ended without finishing their work, one line each with its state, error and log."""


class StoppedFollowing(KeyboardInterrupt):
    """Ctrl-C while following jobs: its message is the one line the command prints (`cli.console`)."""


def job_order(job_id: str) -> tuple[int, str]:
    """A job id's place in submission order ("123" before "1234", an array's "12_3" by its job)."""
    head = job_id.split("_")[0]
    return (int(head) if head.isdigit() else 0, job_id)


def run_slurm(*cmd: str) -> str:
    """A Slurm command's output; its error (e.g. no controller answering) in one line."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ValueError(f"`--launcher slurm`: `{' '.join(cmd)}` did not answer ({error}).") from None
    if done.returncode != 0:
        raise ValueError(f"`--launcher slurm`: `{' '.join(cmd)}` failed: {done.stderr.strip()[:200]}")
    return done.stdout


def node_local(path: str) -> bool:
    """Whether `path` lies in a folder every node has its own of (/tmp, /var/tmp, /dev/shm, $TMPDIR)."""
    path = os.path.realpath(path)
    roots = [*NODE_LOCAL, *([os.environ["TMPDIR"]] if os.environ.get("TMPDIR") else [])]
    return any(path == r or path.startswith(os.path.realpath(r).rstrip("/") + "/") for r in roots)


@dataclass(frozen=True)
class Cluster:
    """The Slurm cluster as `check_cluster` found it, and what every job asks of it."""

    options: SlurmArguments
    partition: str
    nodes: int
    has_gpus: bool
    time_limit: int  # minutes per job (0: none)
    gpus_per_node: int = 0  # on the partition's largest node (0: unknown, or none)

    @property
    def signal_delay(self) -> int:
        """Seconds before its time limit a job is warned (USR2): submitit's 90, a quarter of a short limit (Slurm
        sends it up to a minute early: a one-minute job is warned 15-45 s in)."""
        return min(90, max(10, self.time_limit * 60 // 4)) if self.time_limit else 90

    def gpus(self, wanted: int, flag: str = "--gpus_per_run") -> int:
        """GPUs per job: `--slurm_gpus`, else `wanted` (`flag`) where the partition has GPUs, else 0; more than a
        node of the partition has refused (the job would wait for good)."""
        if self.options.slurm_gpus is not None:
            return self.options.slurm_gpus
        if self.has_gpus and self.gpus_per_node and wanted > self.gpus_per_node:
            raise ValueError(
                f"`{flag}` {wanted}: the largest node of partition {self.partition!r} has {self.gpus_per_node} GPUs; "
                "a job asking more would wait in the queue for good."
            )
        return wanted if self.has_gpus else 0

    def submit(
        self,
        logs: str,
        tag: str,
        name: str,
        gpus: int,
        call: Callable[..., object],
        *args: object,
        note: str | None = None,
    ) -> str:
        """`call(*args)` as one Slurm job of the folder tagged `tag` (`folder_tag`), known to the queue as `name`
        (its comment) and named `<name>.<tag>`, its logs and submitit's files under `logs/<job id>/`; its id. The
        job requeues itself at its time limit (`utils.slurm_job.Requeueable`: warned `signal_delay` seconds before,
        up to `--slurm_requeues` times, noting it at `note`). sbatch's refusal is one line (ValueError),
        and the files submitit wrote before it asked are removed."""
        import submitit

        from .slurm_job import Requeueable, dump_call
        from .slurm_watch import QueueExecutor

        o = self.options
        executor = QueueExecutor(folder=os.path.join(logs, "%j"), max_num_timeout=o.requeues)
        executor.update_parameters(
            job_name=f"{name.replace('/', '-')}.{tag}",
            # --requeue: Slurm may requeue the job (preempted, its node lost) where the cluster's default is not to
            additional_parameters={**o.sbatch_options(), "comment": f"{TAG}:{tag}:{name}", "requeue": True},
            signal_delay_s=self.signal_delay,
            **self.request(gpus),
        )
        os.makedirs(logs, exist_ok=True)
        before = set(os.listdir(logs))
        loaded = dump_call(os.path.join(logs, CALLS), call, *args)
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # submitit prints sbatch's error; it is said below
                return str(executor.submit(Requeueable(loaded, note)).job_id)
        except submitit.core.utils.FailedJobError as error:
            for left in [loaded, *(os.path.join(logs, n) for n in set(os.listdir(logs)) - before)]:
                with contextlib.suppress(OSError):  # the pickled calls and the script of a job never made
                    if os.path.isdir(left):
                        os.rmdir(left)  # `calls/`, made for this job alone
                    else:
                        os.remove(left)
            lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
            said = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else "no reason")
            raise ValueError(f"`--launcher slurm`: sbatch refused {name}'s job: {said[:300]}") from None

    def request(self, gpus: int) -> dict[str, str | int]:
        """The resources every job asks, as submitit's `SlurmExecutor` parameters (sbatch's options with `_` for
        `-`): partition, time limit (0: none), GPUs, and CPUs, memory, account and QoS where given."""
        o = self.options
        given = {"cpus_per_task": o.slurm_cpus, "mem": o.memory, "account": o.slurm_account, "qos": o.slurm_qos}
        asked = {"partition": self.partition, "time": self.time_limit, "gpus_per_node": gpus or None, **given}
        return {k: v for k, v in asked.items() if v is not None}

    def check_request(self, gpus: int, flag: str) -> None:
        """What every job will ask (`request`, and `--slurm_sbatch`) put to `sbatch --test-only`, which says whether
        and when the cluster could run it and submits nothing: a request it refuses (an unknown constraint, more than
        a node has) is refused here in one line, before any work."""
        asked = {**self.request(gpus), **self.options.sbatch_options()}
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in asked.items()]
        cmd = ["sbatch", "--test-only", *flags, "--wrap=true"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise ValueError(f"`--launcher slurm`: `sbatch --test-only` did not answer ({error}).") from None
        if done.returncode != 0:
            said = " ".join(done.stderr.split())[:300] or f"exit status {done.returncode}"
            raise ValueError(f"`{flag}`: Slurm would refuse every job of it: {said}")

    @staticmethod
    def ours(tag: str) -> dict[str, list[str]]:
        """{name: ids, oldest first} of the jobs of the folder tagged `tag` the queue holds in an active state,
        read from their comments (`submit`): the truth of what runs for a folder, whatever its ledger says."""
        out = run_slurm("squeue", "-h", "--states=all", "-o", "%i|%T|%k", "-u", getpass.getuser())
        found: dict[str, list[str]] = {}
        for line in out.splitlines():
            job_id, _, rest = line.strip().partition("|")
            state, _, comment = rest.partition("|")
            owner, _, name = comment.removeprefix(f"{TAG}:").partition(":")
            if comment.startswith(f"{TAG}:") and owner == tag and state.strip() in ACTIVE:
                found.setdefault(name.strip(), []).append(job_id)
        return {name: sorted(ids, key=job_order) for name, ids in found.items()}

    @staticmethod
    def queued(ids: list[str]) -> dict[str, str]:
        """{job id: state} of the jobs among `ids` the queue still holds in an active state (`ACTIVE`)."""
        if not ids:
            return {}
        # the user's jobs, not `-j ids`: squeue refuses a lone id it no longer knows (purged after MinJobAge)
        out = run_slurm("squeue", "-h", "--states=all", "-o", "%i %T", "-u", getpass.getuser())
        states = dict(line.split(maxsplit=1) for line in out.splitlines() if line.strip())
        return {i: states[i].strip() for i in ids if states.get(i, "").strip() in ACTIVE}

    @staticmethod
    def ended(logs: str, job_id: str) -> str:
        """Why an ended job left no result, in one line: Slurm's state where the queue still lists it, the error
        submitit carried back where the call raised (`Job.exception`), and its log."""
        from .slurm_watch import QueueJob

        job = QueueJob(folder=os.path.join(logs, "%j"), job_id=job_id)
        state = job.get_info(mode="force").get("SlurmState", "ENDED")
        error = job.exception()  # None: the call returned; else its error, or submitit's word that it never ended
        return f"job {job_id} {why_ended(state, error)} (log: {job.paths.stderr})"


def why_ended(state: str, error: BaseException | None) -> str:
    """Slurm's `state` and the job's error in one line (`error_line`), with what to raise where the job was warned
    once more after its time-limit requeues were spent."""
    if error is None:
        return state
    spent = " (raise `--slurm_time` or `--slurm_requeues`)" if SPENT in str(error) else ""
    return f"{state}: {error_line(error)}{spent}"


def error_line(error: BaseException) -> str:
    """A job's error in one line (200 characters at most): where the call raised, the last line of its traceback
    (`ValueError: ...`), which submitit's `FailedJobError` frames between two dashed rules and follows with where its
    logs are; else the error's own last line (submitit's word that the job never ended)."""
    from submitit.core.utils import FailedJobError

    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    rules = [i for i, line in enumerate(lines) if set(line.strip()) == {"-"}]
    if isinstance(error, FailedJobError) and len(rules) >= 2 and rules[1] > rules[0] + 1:
        return lines[rules[1] - 1].strip()[:200]
    return lines[-1].strip()[:200] if lines else type(error).__name__


def check_cluster(options: SlurmArguments, folder: str, flag: str) -> Cluster:
    """The cluster asked before any submission: submitit and Slurm's commands present, the partition and account
    known to it, `folder` (`flag`) visible to every node of the partition. Refused in one line naming the field."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise ValueError(f"`--launcher slurm` needs submitit, which is not installed: {INSTALL}.") from None
    if missing := [c for c in ("sbatch", "squeue", "sinfo", "scontrol") if shutil.which(c) is None]:
        raise ValueError(
            f"`--launcher slurm`: Slurm's {', '.join(missing)} not found on PATH; run the command on a node of the "
            "cluster (a login node), or use `--launcher local`."
        )
    listed = [line.strip() for line in run_slurm("sinfo", "-h", "-o", "%P").splitlines() if line.strip()]
    names = [p.rstrip("*") for p in listed]
    partition = options.slurm_partition or next((p.rstrip("*") for p in listed if p.endswith("*")), None)
    if partition is None:
        raise ValueError(f"`--slurm_partition` is required: this cluster has no default partition (it has {names}).")
    if partition not in names:
        raise ValueError(f"`--slurm_partition` {partition!r} is not a partition of this cluster; it has {names}.")
    if options.slurm_account is not None:
        check_account(options.slurm_account)
    rows = [r.split("|") for r in run_slurm("sinfo", "-h", "-p", partition, "-o", "%D|%G|%l|%c|%m").splitlines()]
    rows = [r for r in rows if len(r) >= 3 and r[0].strip()]
    nodes = sum(int(r[0]) for r in rows)
    has_gpus = any("gpu" in r[1] for r in rows)
    if "%" in folder:
        raise ValueError(
            f"`{flag}` {folder}: Slurm reads '%' in a job's log path as a pattern (%u, %j, ...); choose a folder "
            "name without '%'."
        )
    check_resources(options, partition, rows)
    if nodes > 1 and node_local(folder):
        raise ValueError(
            f"`{flag}` {folder} is on a node's own disk (/tmp, /var/tmp, /dev/shm or $TMPDIR) and partition "
            f"{partition!r} has {nodes} nodes: the jobs would write where this command cannot read. Put it on a "
            "filesystem the nodes share (your home or project folder)."
        )
    limit = minutes(rows[0][2]) if rows and options.slurm_time is None else options.time_minutes()
    return Cluster(options, partition, nodes, has_gpus, limit, max((gpus_of(r[1]) for r in rows), default=0))


def check_account(account: str) -> None:
    """`--slurm_account` among the user's accounts where the cluster keeps accounting (without it, Slurm does not
    check accounts either)."""
    config = run_slurm("scontrol", "show", "config")
    storage = next((ln.split("=", 1)[1].strip() for ln in config.splitlines() if "AccountingStorageType" in ln), "")
    if storage.endswith("/none") or shutil.which("sacctmgr") is None:
        return
    user = getpass.getuser()
    out = run_slurm("sacctmgr", "-n", "-P", "show", "assoc", f"where user={user}", "format=account")
    accounts = sorted({line.strip() for line in out.splitlines() if line.strip()})
    if account not in accounts:
        raise ValueError(f"`--slurm_account` {account!r} is not one of {user}'s accounts on this cluster: {accounts}.")
