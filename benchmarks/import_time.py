"""
How long a user waits for the first line: `import constrained_sft`, `constrained-sft --help` and each command's
`--help`, cold (the help cache off: the parsers are built, importing transformers' `TrainingArguments`) and warm (the
help printed from the cache), in fresh interpreters, median and range of `--repeats` runs each.

    python benchmarks/import_time.py --out benchmarks/results/import_time_cpu.json

The target (issue 39): under 1 s on 2 CPU cores for the bare import and every warm help. `tests/cli/test_imports.py`
checks which modules load; times are only measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELP = ["--help"], ["train", "--help"], ["eval", "robustness", "--help"], ["sweep", "--help"], ["study", "--help"]


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return elapsed


def row(name: str, argv: list[str], env: dict[str, str], repeats: int) -> dict:
    times = [timed(argv, env) for _ in range(repeats)]
    return {"what": name, "median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", help="write the rows here as JSON")
    args = parser.parse_args()
    cli = [sys.executable, "-m", "constrained_sft"]
    with tempfile.TemporaryDirectory() as cache:
        warm_env = {**os.environ, "CONSTRAINED_SFT_CACHE": cache, "CONSTRAINED_SFT_HELP_CACHE": "1"}
        cold_env = {**warm_env, "CONSTRAINED_SFT_HELP_CACHE": "0"}
        rows = [row("python -c pass", [sys.executable, "-c", "pass"], warm_env, args.repeats)]
        rows.append(
            row("import constrained_sft", [sys.executable, "-c", "import constrained_sft"], warm_env, args.repeats)
        )
        rows.append(row("import torch (for scale)", [sys.executable, "-c", "import torch"], warm_env, args.repeats))
        for argv in HELP:
            name = "constrained-sft " + " ".join(argv)
            rows.append(row(f"{name} (cold: built)", [*cli, *argv], cold_env, max(1, args.repeats // 2)))
            timed([*cli, *argv], warm_env)  # fills the cache
            rows.append(row(f"{name} (warm: cached)", [*cli, *argv], warm_env, args.repeats))
    result = {"device": f"CPU ({os.cpu_count()} cores)", "python": sys.version.split()[0], "rows": rows}
    for r in rows:
        print(f"{r['what']:<55} {r['median_s']:6.2f} s  [{r['min_s']:.2f}, {r['max_s']:.2f}]")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
