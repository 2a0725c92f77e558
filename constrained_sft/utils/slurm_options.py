"""
The options of `--launcher slurm` (`SlurmArguments`), checked as they are read, before Slurm is asked anything: the
time limit in Slurm's own forms (`minutes`), and no `--slurm_sbatch` option that would undo what the tool sets
(`SET_HERE`: the resources it checks against the partition, the job names the queue is read by, the logs its
messages point to); the resources asked against the partition's largest node (`check_resources`, with the rows
`utils.slurm.check_cluster` reads from `sinfo`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, get_args

from .fields import check_fields

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
REQUEUES = 3  # time-limit requeues a job may make by default (`--slurm_requeues`)
SET_HERE = {
    "partition": "--slurm_partition",
    "account": "--slurm_account",
    "qos": "--slurm_qos",
    "time": "--slurm_time",
    "cpus_per_task": "--slurm_cpus",
    **dict.fromkeys(("mem", "mem_per_cpu", "mem_per_gpu"), "--slurm_mem_gb"),
    **dict.fromkeys(("gres", "gpus", "gpus_per_node", "gpus_per_task", "gpus_per_socket"), "--slurm_gpus"),
    **dict.fromkeys(("job_name", "comment"), "each job is named for its folder and run, which the queue is read by"),
    **dict.fromkeys(("output", "error", "open_mode"), "each job logs under the folder's slurm/logs/<job id>/"),
    **dict.fromkeys(("wrap", "array"), "each job runs one call of this tool"),
    **dict.fromkeys(("nodes", "ntasks", "ntasks_per_node"), "each job is one task on one node"),
    **dict.fromkeys(
        ("signal", "requeue", "no_requeue"),
        "a job is warned before its time limit and requeues itself: --slurm_requeues",
    ),
}


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
    slurm_time: str | None = field(
        default=None,
        metadata={
            "help": "How long a job may run, in Slurm's forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS "
            "(default: the partition's time limit)."
        },
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
    slurm_requeues: int | None = field(
        default=None,
        metadata={
            "help": "Times a job may requeue itself at its time limit, each time going on from its checkpoint and "
            "recorded phases (default 3; preemptions do not count; a job you `scancel` stays cancelled)."
        },
    )
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
        if isinstance(self.slurm_time, int) and not isinstance(self.slurm_time, bool):
            self.slurm_time = str(self.slurm_time)  # a YAML number: minutes, as Slurm reads a bare number
        check_fields(self, SlurmArguments)
        self.validate()

    def validate(self) -> None:
        """The options' own rules, before Slurm is asked anything."""
        slurm_only = [f.name for f in dataclasses.fields(self) if f.name.startswith("slurm_")]
        if self.launcher == "local" and (given := [f"--{n}" for n in slurm_only if getattr(self, n) is not None]):
            raise ValueError(f"{', '.join(given)} apply to `--launcher slurm`; add it, or leave them out.")
        if self.slurm_time is not None and self.time_minutes() < 1:
            raise ValueError(f"`--slurm_time` must be at least a minute, got {self.slurm_time!r}.")
        if self.slurm_requeues is not None and self.slurm_requeues < 0:
            raise ValueError(f"`--slurm_requeues` must be >= 0, got {self.slurm_requeues}.")
        if self.slurm_cpus is not None and self.slurm_cpus < 1:
            raise ValueError(f"`--slurm_cpus` must be >= 1, got {self.slurm_cpus}.")
        if self.slurm_gpus is not None and self.slurm_gpus < 0:
            raise ValueError(f"`--slurm_gpus` must be >= 0, got {self.slurm_gpus}.")
        if self.slurm_mem_gb is not None and self.slurm_mem_gb <= 0:
            raise ValueError(f"`--slurm_mem_gb` must be > 0, got {self.slurm_mem_gb}.")
        self.sbatch_options()

    @property
    def memory(self) -> str | None:
        """`--slurm_mem_gb` as sbatch's `--mem` takes it (whole MB), None where not given."""
        return None if self.slurm_mem_gb is None else f"{int(self.slurm_mem_gb * 1024)}M"

    @property
    def requeues(self) -> int:
        """Time-limit requeues a job may make (`--slurm_requeues`, default `REQUEUES`)."""
        return REQUEUES if self.slurm_requeues is None else self.slurm_requeues

    def time_minutes(self) -> int:
        """`--slurm_time` in whole minutes (seconds round up); 0 where it is not given."""
        if self.slurm_time is None:
            return 0
        try:
            return minutes(self.slurm_time, strict=True)
        except ValueError:
            raise ValueError(
                f"`--slurm_time` {self.slurm_time!r}: give one of Slurm's forms MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM "
                "or D-HH:MM:SS (e.g. 90, 4:00:00, 2-00)."
            ) from None

    def sbatch_options(self) -> dict[str, str]:
        """`--slurm_sbatch` as {option: value} (submitit's `additional_parameters`); an option this tool sets itself
        refused, naming the flag that sets it (it would undo a check, or send logs where no message points)."""
        out = {}
        for item in self.slurm_sbatch or []:
            key, sep, value = item.partition("=")
            if not sep or not key or key.startswith("-"):
                raise ValueError(f"`--slurm_sbatch` {item!r}: give KEY=VALUE without dashes (e.g. constraint=a100).")
            key = key.replace("-", "_")
            if key in SET_HERE:
                use = SET_HERE[key]
                raise ValueError(
                    f"`--slurm_sbatch` {item!r}: {key.replace('_', '-')} is set by this tool"
                    + (f"; use `{use}`." if use.startswith("--") else f" ({use}).")
                )
            out[key] = value
        return out


def minutes(limit: str, strict: bool = False) -> int:
    """A Slurm time limit in whole minutes, seconds rounding up, in Slurm's forms: MM, MM:SS, HH:MM:SS, D-HH,
    D-HH:MM, D-HH:MM:SS; "infinite" (what `sinfo` prints for none) is 0 unless `strict` (a user's `--slurm_time`).
    ValueError for anything else."""
    text = limit.strip()
    if not strict and text.lower() in ("infinite", "unlimited", "n/a", ""):
        return 0
    days, dash, clock = text.rpartition("-")
    parts = clock.split(":")
    if (dash and not days.isdigit()) or not all(p.isdigit() for p in parts) or len(parts) > 3:
        raise ValueError(f"not a Slurm time limit: {limit!r}")
    numbers = [int(p) for p in parts]
    if dash:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, s = (numbers + [0, 0])[:3]
    else:  # MM, MM:SS, HH:MM:SS
        h, m, s = {1: (0, numbers[0], 0), 2: (0, *numbers), 3: tuple(numbers)}[len(numbers)]
    return int(days or 0) * 1440 + h * 60 + m + (1 if s else 0)


def gpus_of(gres: str) -> int:
    """GPUs per node in a `sinfo %G` field ("gpu:h100:8(S:0-1)", "gpu:4,shard:8", "(null)")."""
    count = 0
    for item in gres.split(","):
        kind, *rest = item.split("(")[0].split(":")
        if kind == "gpu":
            count += int(rest[-1]) if rest and rest[-1].isdigit() else 1
    return count


def check_resources(options: SlurmArguments, partition: str, rows: list[list[str]]) -> None:
    """CPUs, memory, GPUs and time per job against the partition's largest node and its limit (`sinfo` rows of
    nodes|gres|time limit|CPUs|memory MB): a job no node can hold would pend for good (`Reason=PartitionConfig`),
    or sbatch would refuse it after the study had prepared its data."""

    def most(column: int) -> int:
        numbers = [int(r[column].rstrip("+")) for r in rows if len(r) > column and r[column].rstrip("+").isdigit()]
        return max(numbers, default=0)

    asked = [
        ("--slurm_cpus", options.slurm_cpus, most(3), "CPU cores"),
        ("--slurm_mem_gb", None if options.slurm_mem_gb is None else options.slurm_mem_gb * 1024, most(4), "MB"),
        ("--slurm_gpus", options.slurm_gpus or None, max((gpus_of(r[1]) for r in rows), default=0), "GPUs"),
    ]
    for flag, wanted, largest, unit in asked:
        if wanted is not None and (largest or flag == "--slurm_gpus") and wanted > largest:
            shown = f"{options.slurm_mem_gb:g} GB" if flag == "--slurm_mem_gb" else f"{wanted:g}"
            has = f"{largest / 1024:g} GB" if flag == "--slurm_mem_gb" else f"{largest} {unit}"
            raise ValueError(
                f"`{flag}` {shown}: the largest node of partition {partition!r} has {has}; a job asking more would "
                "wait in the queue for good."
            )
    limit = max((minutes(r[2]) for r in rows), default=0) if rows and all(minutes(r[2]) for r in rows) else 0
    if options.slurm_time is not None and limit and options.time_minutes() > limit:
        raise ValueError(
            f"`--slurm_time` {options.slurm_time}: partition {partition!r} lets a job run {limit} minute(s) at most."
        )
