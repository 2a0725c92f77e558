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

from constrained_sft.comparison import sweep_arms
from constrained_sft.config import training_level
from constrained_sft.evaluation import RobustnessResults, compare
from constrained_sft.evaluation.report import comparisons_markdown
from constrained_sft.sweep import Objective, SweepArguments
from constrained_sft.sweep.compare import evaluate_finals, run_name
from constrained_sft.sweep.run import retrain
from constrained_sft.sweep.search import best_params
from constrained_sft.tasks import Arm
from constrained_sft.tasks.recipes import dataclass_parser, parse, recipe_and_task


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


def parse_variant(text: str, config_class: type) -> tuple[str, dict]:
    name, _, assignments = text.partition(":")
    params = {}
    for item in assignments.split(","):
        key, _, value = item.partition("=")
        if key not in {f.name for f in dataclasses.fields(config_class)}:
            raise SystemExit(f"--variant {text!r}: `{key}` is not a {config_class.__name__} field.")
        parsed = yaml.safe_load(value)  # YAML 1.1 reads 2e-3 (no dot) as a string
        params[key] = (
            float(parsed)
            if isinstance(parsed, str) and parsed.lstrip("-").replace(".", "").replace("e-", "").isdigit()
            else parsed
        )
    return name, params


def main(argv: list[str]) -> None:
    own, rest = split_argv(argv)
    _, task, rest = recipe_and_task(rest, "eval/ablation/run.py")
    parser = dataclass_parser((SweepArguments, *task.parser_classes()), "eval/ablation/run.py", __doc__)
    settings, *parsed = parse(parser, rest)
    recipe = task.recipe(tuple(parsed))
    variants = [parse_variant(v, type(recipe.training)) for v in own["variant"]]
    settings.locate(recipe.training.output_dir)
    arms = {a.name: a for a in sweep_arms(task, recipe, settings.readouts, baseline=True, more={})}
    if own["arm"] not in arms or own["against"] not in arms:
        raise SystemExit(f"--arm / --against must be arms of the sweep: {list(arms)}.")
    main_results = RobustnessResults.load(os.path.join(settings.sweep_dir, "test"))
    if main_results is None:
        raise SystemExit(f"No sweep comparison in {settings.sweep_dir}/test: run the sweep's compare stage first.")
    train_gamma = training_level(recipe.training.noise_gamma)
    objective = Objective(settings.objective, main_results.gammas, train_gamma, task.headline)
    best = best_params(settings.study(own["arm"], objective), objective.maximize)
    settings.gammas = main_results.gammas.to_list()
    here = dataclasses.replace(settings, sweep_dir=os.path.join(settings.sweep_dir, "ablation"))
    data = task.searching.sweep_data(recipe, settings.validation_size)
    base = dataclasses.replace(recipe.training, per_device_eval_batch_size=settings.eval_batch_size)
    readout = arms[own["arm"]].readout
    ablated = [Arm(variant, readout, True) for variant, _ in variants]
    for arm, (_, params) in zip(ablated, variants, strict=True):
        retrain(task, arm, {**best, **params}, here, data, base)
    results = evaluate_finals(task, ablated, here, train_gamma, recipe.script, pairs=[])
    for arm in (own["arm"], own["against"]):  # same held-out units and noise draws: their saved scores are comparable
        names = [run_name(arm, s) for s in range(settings.final_seeds)]
        results.arms[arm] = names
        results.models.update({n: main_results.models[n] for n in names})
    pairs = [(own["arm"], own["against"])] + [(v, own["against"]) for v, _ in variants]
    comparison = compare(results, task, pairs, settings.bootstrap_samples)
    out = {"best": best, "variants": dict(variants), "comparison": {n: c.to_dict() for n, c in comparison.items()}}
    with open(os.path.join(here.sweep_dir, "ablation.json"), "w") as f:
        json.dump(out, f, indent=2)
    text = comparisons_markdown(comparison)
    with open(os.path.join(here.sweep_dir, "ablation.md"), "w") as f:
        f.write(f"Best {own['arm']} trial: {best}\n\nVariants: {dict(variants)}\n\n{text}\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
