"""
Jobs on a Slurm cluster through submitit (`--launcher slurm`): the study's runs and the sweep's workers. The options
(`SlurmArguments`), the cluster asked before any submission (`check_cluster`: one line naming the field where a
partition, an account or the folder will not do), one submission (`Cluster.submit`) and the queue (`Cluster.queued`).

submitit writes the sbatch script, pickles the call, keeps the logs and the result; no job script is written here.
What is written by hand is the queue's reading: submitit reads job states with `sacct`, which answers only where the
cluster keeps an accounting database (slurmdbd), and many do not; `squeue` answers on every cluster. A job the queue
no longer holds has ended, and what it left in the folder (a study's run records, a sweep's trials) says whether it
finished; submitit's result file, where there is one, says why it did not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import getpass
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias, get_args

from .fields import check_fields
from .files import read_json, write_json
from .types import JSONRead

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

Launcher: TypeAlias = Literal["local", "slurm"]
LAUNCHERS: tuple[Launcher, ...] = get_args(Launcher)
# states in which a job still holds (or waits for) its place: it may yet write its results
ACTIVE = frozenset(
    [
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    ]
)
POLL_FIRST, POLL_MOST = 1.0, 30.0  # seconds between readings of the queue: the first, and at most
NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm")  # per-node folders on every cluster (and $TMPDIR where set)
INSTALL = "pip install 'constrained-sft[slurm]'"


class SlurmJobsError(ValueError):
    """Jobs that ended without finishing their work, one line each with its state, error and log."""


@dataclass
class SlurmArguments:
    """Where the work runs: here, or as Slurm jobs (see the module docstring)."""

    launcher: Launcher = field(
        default="local",
        metadata={
            "help": "'local' (this machine) or 'slurm' (each job submitted to Slurm through submitit; the folder must "
            "be on a filesystem the nodes share; `--wait false` returns after submitting, and the same command "
            "later follows or collects)."
        },
    )
    slurm_partition: str | None = field(
        default=None, metadata={"help": "Slurm partition (default: the cluster's default partition)."}
    )
    slurm_account: str | None = field(default=None, metadata={"help": "Slurm account charged for the jobs."})
    slurm_qos: str | None = field(default=None, metadata={"help": "Slurm quality of service."})
    slurm_time: int | None = field(
        default=None, metadata={"help": "Minutes a job may run (default: the partition's time limit)."}
    )
    slurm_gpus: int | None = field(
        default=None,
        metadata={
            "help": "GPUs per job (default: a study's --gpus_per_run, a sweep worker 1, where the partition has "
            "GPUs; else 0)."
        },
    )
    slurm_cpus: int | None = field(default=None, metadata={"help": "CPU cores per job (default: Slurm's, one)."})
    slurm_mem_gb: float | None = field(default=None, metadata={"help": "Memory per job in GB (default: Slurm's)."})
    slurm_sbatch: list[str] | None = field(
        default=None,
        metadata={
            "help": "More sbatch options, KEY=VALUE, repeatable (e.g. --slurm_sbatch constraint=a100 "
            "--slurm_sbatch exclusive=true): passed to sbatch as --KEY=VALUE.",
            "action": "extend",
        },
    )
    wait: bool = field(
        default=True,
        metadata={
            "help": "With --launcher slurm: follow the jobs to the end (true), or return once they are submitted "
            "(false; the same command later follows them or collects their results)."
        },
    )

    def __post_init__(self) -> None:
        check_fields(self, SlurmArguments)
        self.validate()

    def validate(self) -> None:
        """The options' own rules, before Slurm is asked anything."""
        slurm_only = [f.name for f in dataclasses.fields(self) if f.name.startswith("slurm_")]
        if self.launcher == "local" and (given := [f"--{n}" for n in slurm_only if getattr(self, n) is not None]):
            raise ValueError(f"{', '.join(given)} apply to `--launcher slurm`; add it, or leave them out.")
        for name in ("slurm_time", "slurm_cpus"):
            if (value := getattr(self, name)) is not None and value < 1:
                raise ValueError(f"`--{name}` must be >= 1, got {value}.")
        if self.slurm_gpus is not None and self.slurm_gpus < 0:
            raise ValueError(f"`--slurm_gpus` must be >= 0, got {self.slurm_gpus}.")
        if self.slurm_mem_gb is not None and self.slurm_mem_gb <= 0:
            raise ValueError(f"`--slurm_mem_gb` must be > 0, got {self.slurm_mem_gb}.")
        self.sbatch_options()

    def sbatch_options(self) -> dict[str, str]:
        """`--slurm_sbatch` as {option: value} (submitit's `additional_parameters`)."""
        out = {}
        for item in self.slurm_sbatch or []:
            key, sep, value = item.partition("=")
            if not sep or not key or key.startswith("-"):
                raise ValueError(f"`--slurm_sbatch` {item!r}: give KEY=VALUE without dashes (e.g. constraint=a100).")
            out[key.replace("-", "_")] = value
        return out


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


def minutes(limit: str) -> int:
    """A Slurm time limit ("infinite", "MM", "HH:MM:SS", "D-HH:MM:SS") in minutes; 0 for none."""
    if limit.strip().lower() in ("infinite", "unlimited", "n/a", ""):
        return 0
    days, _, clock = limit.strip().rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    h, m, s = ([0] * (3 - len(parts)) + parts) if len(parts) > 1 else (0, parts[0], 0)
    return int(days or 0) * 1440 + h * 60 + m + (1 if s else 0)


@dataclass(frozen=True)
class Cluster:
    """The Slurm cluster as `check_cluster` found it, and what every job asks of it."""

    options: SlurmArguments
    partition: str
    nodes: int
    has_gpus: bool
    time_limit: int  # minutes per job (0: none)

    def gpus(self, wanted: int) -> int:
        """GPUs per job: `--slurm_gpus`, else `wanted` where the partition has GPUs, else 0."""
        if self.options.slurm_gpus is not None:
            return self.options.slurm_gpus
        return wanted if self.has_gpus else 0

    def submit(self, logs: str, name: str, gpus: int, call: Callable[..., object], *args: object) -> str:
        """`call(*args)` as one Slurm job named `name`, its logs and submitit's files under `logs/<job id>/`; its id."""
        import submitit

        o = self.options
        executor = submitit.SlurmExecutor(folder=os.path.join(logs, "%j"), max_num_timeout=0)
        more = {"account": o.slurm_account, "qos": o.slurm_qos, "cpus_per_task": o.slurm_cpus}
        executor.update_parameters(
            job_name=name,
            partition=self.partition,
            time=self.time_limit,
            gpus_per_node=gpus or None,
            mem=None if o.slurm_mem_gb is None else f"{int(o.slurm_mem_gb * 1024)}M",
            additional_parameters=o.sbatch_options(),
            **{k: v for k, v in more.items() if v is not None},
        )
        return str(executor.submit(in_job, call, *args).job_id)

    @staticmethod
    def queued(ids: list[str]) -> dict[str, str]:
        """{job id: state} of the jobs among `ids` the queue still holds in an active state (`ACTIVE`)."""
        if not ids:
            return {}
        # the user's jobs, not `-j ids`: squeue refuses a lone id it no longer knows (purged after MinJobAge)
        out = run_slurm("squeue", "-h", "--states=all", "-o", "%i %T", "-u", getpass.getuser())
        states = dict(line.split(maxsplit=1) for line in out.splitlines() if line.strip())
        return {i: states[i].strip() for i in ids if states.get(i, "").strip() in ACTIVE}

    def follow(self, jobs: dict[str, str], on_end: Callable[[str, str], None] | None = None) -> None:
        """Wait until none of `jobs` ({name: job id}) is queued or running, reading the queue after a second, then
        less often (at most every 30 s); `on_end(name, job id)` as each leaves it. Ctrl-C: which jobs keep running
        and the `scancel` that stops them, then the interrupt goes on (the jobs are not this process's to stop)."""
        waiting = dict(jobs)
        started, pause = time.monotonic(), POLL_FIRST
        try:
            while waiting:
                active = self.queued(list(waiting.values()))
                for name, job_id in list(waiting.items()):
                    if job_id not in active:
                        del waiting[name]
                        if on_end is not None:
                            on_end(name, job_id)
                if waiting:
                    time.sleep(pause)
                    pause = min(POLL_MOST, POLL_FIRST + (time.monotonic() - started) / 20)
        except KeyboardInterrupt:
            running = ", ".join(f"{name} ({job_id})" for name, job_id in waiting.items())
            print(
                f"\nstopped following; the Slurm jobs keep running: {running}. Cancel them with "
                f"`scancel {' '.join(waiting.values())}`, or run the same command again to follow them and collect."
            )
            raise

    @staticmethod
    def ended(logs: str, job_id: str) -> str:
        """Why an ended job left no result, in one line: its state where Slurm still knows it, submitit's error
        where the call raised, and its log."""
        import submitit

        job: submitit.SlurmJob[object] = submitit.SlurmJob(folder=os.path.join(logs, "%j"), job_id=job_id)
        state = subprocess.run(
            ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=60, check=False
        ).stdout
        found = next((w.split("=", 1)[1] for w in state.split() if w.startswith("JobState=")), "ended")
        why = found
        if job.paths.result_pickle.exists():
            try:
                job.result()
            except Exception as error:  # the call's own exception, as submitit carried it back
                why = f"{found}: {str(error).strip().splitlines()[-1][:200]}"
        return f"job {job_id} {why} (log: {job.paths.stderr})"


@dataclass
class Ledger:
    """`<folder>/slurm/jobs.json`: every job a command submitted, {"jobs": [{"name", "job_id", "submitted", ...}]} in
    order, and the logs of each under `logs/<job id>/` (submitit's folder). Written under `locked` by the command
    that submits, so that two copies at once see each other's jobs."""

    folder: str  # the command folder's slurm/
    flag: str  # the command's folder option, for the messages

    @property
    def path(self) -> str:
        return os.path.join(self.folder, "jobs.json")

    @property
    def logs(self) -> str:
        return os.path.join(self.folder, "logs")

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The ledger's lock between processes (filelock), held for the block: read, submit, write."""
        from filelock import FileLock

        os.makedirs(self.folder, exist_ok=True)
        with FileLock(self.path + ".lock"):
            yield

    def entries(self) -> list[JSONRead]:
        data = read_json(self.path, self.flag) if os.path.isfile(self.path) else {"jobs": []}
        jobs = data.get("jobs") if isinstance(data, dict) else None
        if not isinstance(jobs, list) or not all(isinstance(e, dict) and {"name", "job_id"} <= set(e) for e in jobs):
            raise ValueError(f"`{self.flag}` {self.path} is not a job list this library wrote; move it away.")
        return jobs

    def last(self) -> dict[str, str]:
        """{name: the id of the last job submitted under it}."""
        return {e["name"]: str(e["job_id"]) for e in self.entries()}

    def add(self, name: str, job_id: str, **more: object) -> None:
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        write_json(self.path, {"jobs": [*self.entries(), {"name": name, "job_id": job_id, **more, "submitted": now}]})


def in_job(call: Callable[..., object], *args: object) -> object:
    """What every Slurm job runs: `call(*args)` with torch on the cores Slurm gave the job (it would take the
    node's every core, oversubscribing a node shared with other jobs)."""
    if cores := os.environ.get("SLURM_CPUS_PER_TASK"):
        import torch

        torch.set_num_threads(int(cores))
    return call(*args)


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
    rows = run_slurm("sinfo", "-h", "-p", partition, "-o", "%D|%G|%l").splitlines()
    nodes = sum(int(r.split("|")[0]) for r in rows if r.strip())
    has_gpus = any("gpu" in r.split("|")[1] for r in rows if r.strip())
    if nodes > 1 and node_local(folder):
        raise ValueError(
            f"`{flag}` {folder} is on a node's own disk (/tmp, /var/tmp, /dev/shm or $TMPDIR) and partition "
            f"{partition!r} has {nodes} nodes: the jobs would write where this command cannot read. Put it on a "
            "filesystem the nodes share (your home or project folder)."
        )
    limit = minutes(rows[0].split("|")[2]) if rows and options.slurm_time is None else (options.slurm_time or 0)
    return Cluster(options, partition, nodes, has_gpus, limit)


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
