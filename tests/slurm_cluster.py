"""
A real one-node Slurm cluster for the tests, from Debian's packages (`slurm-wlm`, `munge`): `munged`, `slurmctld` and
`slurmd` started with a `slurm.conf` generated in a temporary folder (this machine as the node, its cores, free
ports), as `tests/sweep/test_postgres.py` starts PostgreSQL. Every Slurm command of the test process and of its
children finds it through `SLURM_CONF`. The daemons run as root (the container's user); without root, or without the
packages, the tests that need it are skipped saying why, unless CONSTRAINED_SFT_REQUIRE_SLURM=1 (set by `.ci/run`,
which installs the packages), where they fail.

The cluster keeps no accounting database (no slurmdbd): `sacct` answers nothing, and the launcher reads the queue
with `squeue` (`constrained_sft.utils.slurm`), as it must on clusters without one.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass

DAEMONS = ("munged", "slurmctld", "slurmd")
PARTITION = "debug"

CONF = """ClusterName=csft-test
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock,cred_expire=10
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=2
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=4000 State=UNKNOWN
PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def daemon(name: str) -> str:
    """The daemon's program: on PATH, or in /usr/sbin (Debian's place, off a non-root PATH)."""
    return shutil.which(name) or f"/usr/sbin/{name}"


def missing_reason() -> str | None:
    """Why this machine cannot start the cluster, or None."""
    if absent := [d for d in DAEMONS if not os.path.exists(daemon(d))]:
        return f"no {', '.join(absent)} (Debian: apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the test cluster's daemons run as root, and this user is not"
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "no submitit (pip install 'constrained-sft[slurm]')"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SlurmCluster:
    """The running cluster: its folder, its configuration (`conf`) and the environment that reaches it (`env`)."""

    root: str
    conf: str

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": self.conf}

    def run(self, *cmd: str, check: bool = True) -> str:
        done = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=60, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
        return done.stdout

    def states(self) -> dict[str, tuple[str, str]]:
        """{job id: (name, state)} of every job the controller still knows."""
        out = self.run("squeue", "-h", "--states=all", "-o", "%i|%j|%T")
        return {i: (n, s) for i, n, s in (line.split("|") for line in out.splitlines() if line.strip())}

    def seconds_left(self, job_id: str) -> int | None:
        """Seconds before the job's time limit (squeue's %L); None without a limit or where squeue has no figure."""
        out = self.run("squeue", "-h", "-j", job_id, "-o", "%L").strip()
        days, _, clock = out.rpartition("-")
        parts = clock.split(":")
        if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3 or days and not days.isdigit():
            return None
        seconds = 0
        for part in parts:
            seconds = seconds * 60 + int(part)
        return seconds + int(days or 0) * 86400

    def log_tail(self) -> str:
        tails = []
        for name in ("slurmctld", "slurmd"):
            with open(os.path.join(self.root, f"{name}.log"), errors="replace") as f:
                tails.append(f.read()[-1500:])
        return "".join(tails)

    def stop(self) -> None:
        """Every daemon ended (SIGTERM, then SIGKILL after 10 s), then the folder removed."""
        for name in ("slurmd", "slurmctld", "munged"):
            pid_file = os.path.join(self.root, f"{name}.pid")
            try:
                with open(pid_file) as f:
                    pid = int(f.read().strip())
                os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError):
                continue
            deadline = time.monotonic() + 10
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not reaped by a parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start(wait: float = 60.0) -> SlurmCluster:
    """The cluster started and answering (`sinfo` shows its node idle), or RuntimeError with the daemons' logs."""
    root = tempfile.mkdtemp(prefix="csft-slurm-")
    for sub in ("state", "spool"):
        os.makedirs(os.path.join(root, sub))
    key = os.path.join(root, "munge.key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o400)
    conf = os.path.join(root, "slurm.conf")
    host = socket.gethostname().split(".")[0]
    with open(conf, "w") as f:
        f.write(CONF.format(host=host, ctld_port=free_port(), d_port=free_port(), root=root,
                            cpus=os.cpu_count() or 1, partition=PARTITION))  # fmt: skip
    cluster = SlurmCluster(root, conf)
    options = {"env": cluster.env, "capture_output": True, "timeout": 60, "check": True}
    subprocess.run(
        [daemon("munged"), "-f", f"--socket={root}/munge.sock", f"--key-file={key}", f"--log-file={root}/munged.log",
         f"--pid-file={root}/munged.pid", f"--seed-file={root}/munged.seed"], **options,
    )  # fmt: skip
    subprocess.run([daemon("slurmctld"), "-c"], **options)
    subprocess.run([daemon("slurmd")], **options)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=cluster.env).stdout
        if out.strip() == "idle":
            return cluster
        time.sleep(0.2)
    tail = cluster.log_tail()
    cluster.stop()
    raise RuntimeError(f"the test Slurm cluster did not come up in {wait:.0f} s:\n{tail}")
