"""
`constrained-sft eval harness`: every model at every (task, gamma, noise seed) cell through lm-eval's
`simple_evaluate` with `NoisyLM`, each cell's per-document scores (`log_samples`) saved as it finishes so a killed
run resumes from the finished cells; then the arms compared, metric by metric and level by level, with the paired
bootstrap and verdict rule of every other comparison (documents are the units, models of an arm its training seeds,
noise seeds summed), written as results.json and report.md with a metric-vs-gamma plot per task.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ...data import ModelSpec, model_identities
from ...noise import embedding_sigma
from ...tasks.sft import causal_lm_config
from ...utils.files import read_json, write_json
from ...utils.output_folders import OutputDirError, check_folder, child_path, differences, mark_folder, normalized
from ...utils.types import JSONObject
from ..bootstrap import Statistic, bootstrap_interval, paired_bootstrap
from ..comparisons import Band, Comparison, Difference, StatisticRow
from ..loading import reference_sigma, versions
from .arguments import HarnessArguments
from .results import HarnessFolder, HarnessResults, HarnessSettings

COMMAND = "eval harness"


def cell_path(output_dir: str, model: str, task: str, gamma: float, seed: int) -> str:
    """Where a cell is kept: its model, task, exact level (`repr`: 0.1 and 0.10000001 are two levels) and seed."""
    return child_path(output_dir, "cells", model.replace("/", "__"), task, f"gamma={gamma!r},seed={seed}.json")


def reusable_cells(output_dir: str, todo, keys: dict[str, JSONObject], versions_: dict[str, str]) -> dict[tuple, dict]:
    """The finished cells of `todo` ((model, path, task, gamma, seed) rows) that match their `keys` ({model: {model
    fingerprint, sigma_x, task versions}}); a cell of the same place made from another model behind the name, another
    noise scale or another task definition is refused before any work, naming it."""
    cells = {}
    for name, _, task, gamma, seed in todo:
        target = cell_path(output_dir, name, task, gamma, seed)
        if not os.path.isfile(target):
            continue
        cell = read_json(target, "--output_dir")
        wanted = {**keys[name], "task": versions_[task]}
        if not isinstance(cell, dict) or cell.get("key") != normalized(wanted):
            saved = cell.get("key", {}) if isinstance(cell, dict) else {}
            raise OutputDirError(
                f"`--output_dir` cell {target} was made from {differences(saved, normalized(wanted))}: another model "
                "behind the same name, another noise scale or another task definition. Give another --output_dir or "
                "another model name."
            )
        cells[(name, task, gamma, seed)] = cell
    return cells


def sample_scores(samples: list[dict]) -> dict[str, dict[int, list[float]]]:
    """{metric: {doc id: [passed, counted]}} from lm-eval's logged samples: a number or flag counts once, a list of
    flags (IFEval's instruction-level metrics) counts each instruction."""
    out: dict[str, dict[int, list[float]]] = {}
    for sample in samples:
        for metric in sample["metrics"]:
            value = sample[metric]
            values = value if isinstance(value, list) else [value]
            key = f"{metric},{sample.get('filter', 'none')}"
            out.setdefault(key, {})[int(sample["doc_id"])] = [float(sum(map(float, values))), float(len(values))]
    return out


def evaluate_cell(
    args: HarnessArguments, model, tokenizer, task: str, gamma: float, seed: int, sigma: float, manager
) -> dict:
    import lm_eval

    from .model import NoisyLM

    lm = NoisyLM(
        pretrained=model,
        tokenizer=tokenizer,
        batch_size=args.batch_size,
        device=str(model.device),
        gamma=gamma,
        noise_seed=seed,
        sigma_x=sigma,
        noise_mean=args.noise_mean,
    )
    started = time.time()
    out = lm_eval.simple_evaluate(
        model=lm,
        tasks=[task],
        task_manager=manager,
        log_samples=True,
        limit=args.limit,
        num_fewshot=args.num_fewshot,
        apply_chat_template=args.apply_chat_template,
        gen_kwargs=f"max_gen_toks={args.max_gen_toks}" if args.max_gen_toks else None,
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
        fewshot_random_seed=0,
    )
    scores = sample_scores(out["samples"][task])
    return {
        "task": task,
        "gamma": gamma,
        "seed": seed,
        "seconds": round(time.time() - started, 1),
        "aggregate": {k: v for k, v in out["results"][task].items() if isinstance(v, float)},
        "scores": {m: {str(d): v for d, v in per.items()} for m, per in scores.items()},
    }


def arm_arrays(cells: dict, members: list[str], task: str, metric: str, gammas: list[float], seeds: int):
    """`{"passed", "counted"}` as `[K, S, N]` (levels, the arm's models, documents), summed over noise seeds."""
    docs = sorted(
        {
            int(d)
            for m in members
            for g in gammas
            for s in range(seeds)
            for d in cells[(m, task, g, s)]["scores"][metric]
        }
    )
    passed = np.zeros((len(gammas), len(members), len(docs)))
    counted = np.zeros_like(passed)
    for k, g in enumerate(gammas):
        for j, m in enumerate(members):
            for s in range(seeds):
                per = cells[(m, task, g, s)]["scores"][metric]
                for i, d in enumerate(docs):
                    p, c = per.get(str(d), (0.0, 0.0))
                    passed[k, j, i] += p
                    counted[k, j, i] += c
    return {"passed": passed, "counted": counted}


def level_statistic(task: str, metric: str, gamma: float, k: int) -> Statistic:
    def rate(sums: dict[str, np.ndarray]) -> np.ndarray:  # [..., levels, ...] sums -> the pass rate at level k
        return sums["passed"][..., k] / sums["counted"][..., k]

    return Statistic(f"{task}/{metric}@{gamma:g}", rate)


def compare_arms(
    args: HarnessArguments, arms: dict, cells: dict, metrics: dict[str, list[str]]
) -> tuple[dict[str, Comparison], dict[str, dict[str, Band]]]:
    """(comparisons {name: Comparison}, bands {arm: {task/metric: Band}})."""
    names = list(arms)
    comparisons: dict[str, Comparison] = {}
    bands: dict[str, dict[str, Band]] = {a: {} for a in arms}
    pairs = args.pairs(names)
    for task, task_metrics in metrics.items():
        for metric in task_metrics:
            arrays = {
                a: arm_arrays(cells, [m for m, _ in arms[a]], task, metric, args.gammas, args.noise_seeds)
                for a in names
            }
            stats = [level_statistic(task, metric, g, k) for k, g in enumerate(args.gammas)]
            for a in names:
                whole = Statistic("all", lambda sums: sums["passed"] / sums["counted"])
                value, low, high = bootstrap_interval(arrays[a], whole, args.bootstrap_samples)
                bands[a][f"{task}/{metric}"] = Band(value.tolist(), low.tolist(), high.tolist())
            for a, b in pairs:
                intervals = paired_bootstrap(arrays[a], arrays[b], stats, n_boot=args.bootstrap_samples)
                rows = comparisons.setdefault(f"{a} - {b}", Comparison(a, b, {})).rows
                for k, stat in enumerate(stats):
                    per_seed = [(arr["passed"][k].sum(1) / arr["counted"][k].sum(1)) for arr in (arrays[a], arrays[b])]
                    value_a, value_b = (
                        float(arr["passed"][k].sum() / arr["counted"][k].sum()) for arr in (arrays[a], arrays[b])
                    )
                    std = (float(np.std(per_seed[0])), float(np.std(per_seed[1])))
                    rows[stat.name] = StatisticRow(value_a, value_b, std, Difference.of(intervals[stat.name]))
    return comparisons, bands


def run(args: HarnessArguments) -> HarnessResults:
    """Evaluate every missing cell, then compare and report; returns what results.json holds."""
    from transformers import AutoModelForCausalLM

    from ...data import load_pretrained
    from .report import write_harness_report

    output_dir = args.validate()
    check_folder(output_dir, COMMAND, args.folder_settings())
    arms = args.arms()
    tasks = args.task_names()
    manager = args.task_manager()
    models = [(name, path) for members in arms.values() for name, path in members]
    flag = "--arm" if args.arm else "--models"
    for name, path in models:  # every model is a causal LM, from its config, before any loads
        causal_lm_config(ModelSpec(name, path, flag=flag))
    first = models[0][1]
    sigma, source = reference_sigma(args.sigma_x, first)
    identities = model_identities(models)
    # one scale for every cell: as given or recorded, else measured on the first model (the same model, the same scale)
    scale = {"sigma_x": sigma} if sigma is not None else {"sigma_x_measured_on": identities[models[0][0]]}
    versions_ = args.task_versions(manager)
    keys: dict[str, JSONObject] = {name: {"model": identities[name], **scale} for name, _ in models}  # + the task's
    started = time.time()
    todo = [(m, p, t, g, s) for m, p in models for t in tasks for g in args.gammas for s in range(args.noise_seeds)]
    cells = reusable_cells(output_dir, todo, keys, versions_)  # every finished cell checked before any model loads
    mark_folder(output_dir, COMMAND, args.folder_settings())
    loaded: tuple[str, torch.nn.Module, Any] | None = None  # (path, model, tokenizer)
    for name, path, task, gamma, seed in tqdm(todo, desc="harness cells", unit="cell"):
        target = cell_path(output_dir, name, task, gamma, seed)
        if (name, task, gamma, seed) in cells:
            continue
        if loaded is None or loaded[0] != path:
            dtype = args.dtype if args.dtype == "auto" else getattr(torch, args.dtype)
            spec = ModelSpec(name, path, flag=flag)
            model, tokenizer = load_pretrained(spec, AutoModelForCausalLM, dtype=dtype)
            device = "cuda" if torch.cuda.is_available() else "cpu"  # lm-eval's default device, where there is one
            loaded = (path, model.to(device).eval(), tokenizer)
        if sigma is None:
            sigma, source = embedding_sigma(loaded[1]), f"measured on {first}"
        with torch.no_grad():
            cell = evaluate_cell(args, loaded[1], loaded[2], task, gamma, seed, sigma, manager)
        key = {**keys[name], "task": versions_[task]}
        cell["key"], cell["sigma_x"] = normalized(key), sigma
        os.makedirs(os.path.dirname(target), exist_ok=True)
        write_json(target, cell)
        cells[(name, task, gamma, seed)] = cell
    if sigma is None:  # every cell reused, each measured at the first model's scale: the scale they recorded
        sigma = next((c["sigma_x"] for c in cells.values() if c.get("sigma_x") is not None), None)
        if sigma is None:  # cells of an earlier version, which did not record it: measured again, the same way
            sigma = embedding_sigma(load_pretrained(ModelSpec(*models[0], flag=flag), AutoModelForCausalLM)[0])
        source = f"measured on {first}"
    metrics = {t: sorted(cells[(models[0][0], t, args.gammas[0], 0)]["scores"]) for t in tasks}
    comparisons, bands = compare_arms(args, arms, cells, metrics)
    given = dataclasses.asdict(args)  # the fields (not what a method cached on the arguments)
    results = HarnessResults(
        settings=HarnessSettings.from_dict({**given, "sigma_x": sigma, "sigma_x_source": source}),
        versions=versions("lm-eval", "transformers", "torch"),
        arms={a: [m for m, _ in members] for a, members in arms.items()},
        models={
            m: {
                t: {
                    metric: [_mean(cells, m, t, g, args.noise_seeds, metric) for g in args.gammas]
                    for metric in metrics[t]
                }
                for t in tasks
            }
            for m, _ in models
        },
        bands=bands,
        comparisons=comparisons,
        cell_seconds=round(sum(c["seconds"] for c in cells.values()), 1),
        wall_seconds=round(time.time() - started, 1),
    )
    write_json(HarnessFolder(output_dir).results_json, results.to_dict())
    results.files = write_harness_report(results, output_dir)
    return results


def _mean(cells, model: str, task: str, gamma: float, seeds: int, metric: str) -> float:
    """The metric over every document and noise seed of one model at one level (pooled, like the statistics)."""
    per = [v for s in range(seeds) for v in cells[(model, task, gamma, s)]["scores"][metric].values()]
    counted = sum(c for _, c in per)
    return sum(p for p, _ in per) / counted if counted else math.nan
