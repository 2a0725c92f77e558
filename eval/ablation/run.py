"""
One-lever-at-a-time ablation around a sweep's best constrained configuration (issue 13's follow-up when the
constrained model does not beat ERM): each variant changes one knob of the best trial, is retrained with the same
seeds, evaluated on the same test rows and noise draws, and compared with the ERM arm by paired bootstrap.

    python eval/ablation/run.py <the sweep's own flags> --arm constrained-linear --against erm-linear \\
        --variant lr-matched:learning_rate=7.4e-5 --variant epochs-2:num_train_epochs=2

Needs a finished `constrained-sft sweep ... --baseline erm` in `--sweep_dir`; writes `<sweep_dir>/ablation/`:
`final/<variant>/seed<s>/` (models), `test/` (their robustness report), `ablation.json` and `ablation.md`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import yaml
from trl import ModelConfig, TrlParser

from constrained_sft.cli.train_classifier import ClassifierScriptArguments
from constrained_sft.config import ConstrainedConfig
from constrained_sft.sweep import SweepArguments, compare
from constrained_sft.sweep.run import retrain, sweep_data, training_gamma
from constrained_sft.sweep.search import Arm, best_params


def split_argv(argv: list[str]) -> tuple[dict, list[str]]:
    """This script's own flags (--arm, --against, repeated --variant name:key=value[,key=value]) and the rest."""
    own, rest, i = {"variant": []}, [], 0
    while i < len(argv):
        if argv[i] in ("--arm", "--against", "--variant"):
            key, value = argv[i][2:], argv[i + 1]
            own["variant"].append(value) if key == "variant" else own.__setitem__(key, value)
            i += 2
        else:
            rest.append(argv[i])
            i += 1
    if not own.get("arm") or not own.get("against") or not own["variant"]:
        raise SystemExit("usage: run.py <sweep flags> --arm ARM --against ERM_ARM --variant name:key=value ...")
    return own, rest


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, assignments = text.partition(":")
    params = {}
    for item in assignments.split(","):
        key, _, value = item.partition("=")
        if key not in {f.name for f in dataclasses.fields(ConstrainedConfig)}:
            raise SystemExit(f"--variant {text!r}: `{key}` is not a ConstrainedConfig field.")
        parsed = yaml.safe_load(value)  # YAML 1.1 reads 2e-3 (no dot) as a string
        params[key] = (
            float(parsed)
            if isinstance(parsed, str) and parsed.lstrip("-").replace(".", "").replace("e-", "").isdigit()
            else parsed
        )
    return name, params


def main(argv: list[str]) -> None:
    own, rest = split_argv(argv)
    parser = TrlParser((SweepArguments, ClassifierScriptArguments, ModelConfig, ConstrainedConfig))
    settings, script_args, model_args, training_args = parser.parse_args_and_config(rest)
    variants = [parse_variant(v) for v in own["variant"]]
    settings.locate(training_args.output_dir)
    best = best_params(settings.study(own["arm"]))
    with open(os.path.join(settings.sweep_dir, "test", "results.json")) as f:
        main_results = json.load(f)
    settings.gammas = main_results["settings"]["gammas"]
    here = dataclasses.replace(settings, sweep_dir=os.path.join(settings.sweep_dir, "ablation"))
    data = sweep_data(settings, script_args, model_args)
    base = dataclasses.replace(training_args, per_device_eval_batch_size=settings.eval_batch_size)
    readout = own["arm"].split("-", 1)[1]
    for variant, params in variants:
        retrain(Arm(variant, readout, True), {**best, **params}, here, data, base, script_args.classifier_pooling)
    results = compare.evaluate_finals([v for v, _ in variants], here, training_gamma(training_args), script_args)
    for arm in (own["arm"], own["against"]):  # same test rows and noise draws: their saved hits are comparable
        for s in range(settings.final_seeds):
            results["models"][compare.run_name(arm, s)] = main_results["models"][compare.run_name(arm, s)]
    pairs = [(own["arm"], own["against"])] + [(v, own["against"]) for v, _ in variants]
    comparison = compare.compare_arms(results, pairs, settings.final_seeds, settings.bootstrap_samples)
    out = {"best": best, "variants": dict(variants), "comparison": comparison}
    with open(os.path.join(here.sweep_dir, "ablation.json"), "w") as f:
        json.dump(out, f, indent=2)
    table = compare.table(comparison)
    with open(os.path.join(here.sweep_dir, "ablation.md"), "w") as f:
        f.write(f"Best {own['arm']} trial: {best}\n\nVariants: {dict(variants)}\n\n{table}\n")
    print(table)


if __name__ == "__main__":
    main(sys.argv[1:])
