"""
The paper's AlpacaEval comparison (Section 6, Appendix B.7) as one resumable run: every generator answers the
instructions with embedding noise at every level (`constrained-sft eval generate`), then the judge compares the
model with the reference level by level (`constrained-sft eval alpaca`).

    python eval/alpaca/run.py --config eval/alpaca/llama-3.1-8b.yaml
    python eval/alpaca/run.py --config eval/alpaca/smollm2-135m.yaml                  # offline, CPU
    python eval/alpaca/run.py --config <settings.yaml> --max_instances 16 --judge test  # `--key value` overrides

Writes <output_dir>/generations/<name>/gamma_<g>.json per generator and level, and alpaca_eval.json,
alpaca_win_rate.png and report.html in <output_dir>. A rerun skips finished batches and cached verdicts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

import yaml

from constrained_sft.evaluation import HeadToHead
from constrained_sft.evaluation.alpaca import AlpacaArguments, judge_setup, quiet_alpaca_eval, result_lines
from constrained_sft.evaluation.alpaca import run as judge
from constrained_sft.evaluation.alpaca.generate import GenerateArguments
from constrained_sft.evaluation.alpaca.generate import run as generate

# Keys a settings file has besides the generation and judging fields; those fields come from the two dataclasses,
# less the ones this script sets itself.
OWN_KEYS = {"generators", "model", "reference", "output_dir"}
GENERATE_KEYS = {f.name for f in dataclasses.fields(GenerateArguments)} - {"model", "name", "output_dir"}
JUDGE_KEYS = {f.name for f in dataclasses.fields(AlpacaArguments)} - {
    "generations",
    "output_dir",
    "model",
    "reference",
}


class SettingsError(ValueError):
    """A settings file or override that cannot run; the message names the key and what is allowed."""


def parse(argv: list[str]) -> dict[str, Any]:
    """`--config FILE` plus `--key value` overrides (values read as YAML: `--gammas "[0, 1.5]"`, `--seed 1`)."""
    if len(argv) % 2 or any(not a.startswith("--") for a in argv[::2]):
        raise SettingsError(f"expected `--config FILE` and `--key value` pairs, got {argv}.")
    pairs = {k[2:]: v for k, v in zip(argv[::2], argv[1::2], strict=True)}
    if "config" not in pairs:
        raise SettingsError("`--config` is required: a settings file such as eval/alpaca/llama-3.1-8b.yaml.")
    with open(pairs.pop("config")) as f:
        settings = yaml.safe_load(f) or {}
    settings.update({k: yaml.safe_load(v) for k, v in pairs.items()})
    return settings


def check(settings: dict[str, Any]) -> tuple[dict[str, str], GenerateArguments, AlpacaArguments]:
    """Every key known and the two compared generators listed: the arguments of both halves, before any work."""
    allowed = OWN_KEYS | GENERATE_KEYS | JUDGE_KEYS
    if unknown := sorted(set(settings) - allowed):
        raise SettingsError(f"unknown settings {unknown}; allowed keys: {sorted(allowed)}.")
    generators = settings.get("generators")
    if not isinstance(generators, dict) or not generators:
        raise SettingsError("`generators` must map each generator's name to its model (folder, Hub id or alias).")
    for key in ("model", "reference", "output_dir"):
        if not settings.get(key):
            raise SettingsError(f"`{key}` is required.")
    for key in ("model", "reference"):
        if settings[key] not in generators:
            raise SettingsError(f"`{key}` is {settings[key]!r}, not one of the generators {sorted(generators)}.")
    out = settings["output_dir"]
    template = GenerateArguments(
        model="-",
        output_dir=os.path.join(out, "generations"),
        **{k: settings[k] for k in GENERATE_KEYS & set(settings)},
    )
    judging = AlpacaArguments(
        generations=template.output_dir,
        output_dir=out,
        model=settings["model"],
        reference=settings["reference"],
        **{k: settings[k] for k in JUDGE_KEYS & set(settings)},
    )
    if judging.gammas is None:  # judge exactly the levels this run generates
        judging.gammas = list(template.gammas)
    return generators, template, judging


def run(settings: dict[str, Any]) -> HeadToHead:
    generators, template, judging = check(settings)
    judge_setup(judging)  # a missing API key or judge model fails now, not after hours of generation
    first = judging.model  # its sigma_x (as given, recorded by its training, or measured) perturbs every generator
    order = [first] + [name for name in generators if name != first]
    for name in order:
        generate(dataclasses.replace(template, model=generators[name], name=name))
        if template.sigma_x is None:
            with open(os.path.join(template.output_dir, first, "settings.json")) as f:
                template = dataclasses.replace(template, sigma_x=json.load(f)["sigma_x"])
    return judge(judging)


def main(argv: list[str]) -> int:
    settings = parse(argv)
    quiet_alpaca_eval()
    print("\n".join(result_lines(run(settings))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
