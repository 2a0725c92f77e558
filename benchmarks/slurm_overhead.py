"""
What `--launcher slurm` costs per run over running the study here, on the tests' one-node Slurm cluster
(`tests/slurm_cluster.py`: munged, slurmctld and slurmd from Debian's packages; this machine's cores as the node):

- `submit`: one `Cluster.submit` (submitit writes the pickle and the sbatch script, sbatch answers with an id);
- `turnaround`: a job that does nothing (`os.getpid`), from submission until its result is written: the scheduler's
  start (`SchedulerParameters=sched_interval=1`), srun, a fresh Python unpickling the call;
- `imports`: a fresh Python importing what a study job runs (the training stack and the task), as each job does;
- `per run`: the tiny two-arm study (the tests' tiny model, one seed, no exit decoding) through Slurm with every
  core per job (one job at a time, as the local study runs them) minus the same study here, over its runs.

Interleaved over `--repeats` (each repeat runs the local and the Slurm study once, in a rotated order); medians and
95% t-intervals of the per-run difference.

    python benchmarks/slurm_overhead.py --out benchmarks/results/slurm_overhead_cpu.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from provenance import machine, source_commit, write_report

TESTS = Path(__file__).resolve().parent.parent / "tests"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trivial", type=int, default=5, help="trivial jobs timed for submit and turnaround")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(TESTS))
    import slurm_cluster
    from intervals import t_interval

    import constrained_sft

    if reason := slurm_cluster.missing_reason():
        raise SystemExit(f"cannot start the test cluster: {reason}")
    cluster = slurm_cluster.start()
    os.environ["SLURM_CONF"] = cluster.conf
    scratch = Path(tempfile.mkdtemp(prefix="slurm-bench-"))
    try:
        submit, turnaround = trivial_jobs(scratch / "trivial", args.trivial)
        imports = [import_seconds() for _ in range(3)]
        assets = tiny_assets(scratch / "assets")
        local, remote = [], []
        for r in range(args.repeats):
            order = [("local", local), ("slurm", remote)][:: 1 if r % 2 == 0 else -1]
            for way, seconds in order:
                seconds.append(study(assets, scratch / f"{way}-{r}", way == "slurm"))
        runs = 2
        per_run = [(s - loc) / runs for s, loc in zip(remote, local, strict=True)]
        low, high = t_interval(per_run)
        report = {
            "benchmark": "slurm_overhead",
            "machine": machine(),
            "commit": source_commit(os.path.dirname(os.path.abspath(constrained_sft.__file__))),
            "cluster": f"one node, {os.cpu_count()} CPUs, {cluster.run('sinfo', '-V').strip()}",
            "submit_seconds": {"median": statistics.median(submit), "all": submit},
            "turnaround_seconds": {"median": statistics.median(turnaround), "all": turnaround},
            "job_import_seconds": {"median": statistics.median(imports), "all": imports},
            "study_local_seconds": local,
            "study_slurm_seconds": remote,
            "per_run_overhead_seconds": {"median": statistics.median(per_run), "low": low, "high": high},
        }
        print(
            f"submit {statistics.median(submit) * 1000:.0f} ms, trivial job turnaround "
            f"{statistics.median(turnaround):.1f} s, a job's imports {statistics.median(imports):.1f} s; the tiny study: here {statistics.median(local):.1f} s, through "
            f"Slurm {statistics.median(remote):.1f} s: {statistics.median(per_run):.1f} s per run "
            f"[{low:.1f}, {high:.1f}]"
        )
        write_report(args.out, report)
    finally:
        cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def trivial_jobs(folder: Path, count: int) -> tuple[list[float], list[float]]:
    """(seconds per submission, seconds from submission until the result is written) of `count` empty jobs."""
    from constrained_sft.utils.slurm import SlurmArguments, check_cluster

    found = check_cluster(SlurmArguments(launcher="slurm", slurm_cpus=1), str(folder), "--folder")
    submit, turnaround = [], []
    for _ in range(count):
        started = time.perf_counter()
        job_id = found.submit(str(folder), "trivial", 0, os.getpid)
        submit.append(time.perf_counter() - started)
        result = folder / job_id / f"{job_id}_0_result.pkl"
        while not result.exists():
            time.sleep(0.02)
        turnaround.append(time.perf_counter() - started)
    return submit, turnaround


def import_seconds() -> float:
    """Wall seconds of a fresh Python importing what a study job imports before its first phase."""
    import subprocess

    code = (
        "from constrained_sft.study.phases import run_job; from constrained_sft.tasks import get_task; get_task('sft')"
    )
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - started


def tiny_assets(root: Path) -> Path:
    """The study tests' tiny model, encoder, rows and twin recipes (tests/test_study.py)."""
    import json

    from test_study import RECIPE, rows

    from constrained_sft.testing import tiny_causal_lm, tiny_encoder, tiny_tokenizer

    root.mkdir(parents=True)
    tiny_causal_lm("llama", seed=1).save_pretrained(root / "model")
    tiny_tokenizer().save_pretrained(root / "model")
    tiny_encoder("bert", layers=2).save_pretrained(root / "encoder")
    tiny_tokenizer().save_pretrained(root / "encoder")
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(56)))
    for kind in ("descent", "none"):
        text = RECIPE.format(model=root / "model", data=root / "rows.jsonl", constraints=kind, out=root / "run")
        (root / f"{kind}.yaml").write_text(text)
    return root


def study(assets: Path, folder: Path, on_slurm: bool) -> float:
    """Wall seconds of the tiny study in a fresh process (the CLI, as a user runs it)."""
    import subprocess

    from test_study import study_argv

    argv = study_argv(assets, folder, "--training_seeds", "1", "--exit_prompts", "0")
    if on_slurm:
        argv += ["--launcher", "slurm", "--slurm_cpus", str(os.cpu_count() or 1)]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "constrained_sft", *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return time.perf_counter() - started


if __name__ == "__main__":
    raise SystemExit(main())
