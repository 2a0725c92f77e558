"""
What descending layers buy at inference (`constrained-sft eval exits`): self-speculative decoding, where the first l
layers of a model, read out through its own final norm and LM head (the readout the constraints train), draft tokens
that the full model then verifies (transformers' `generate(assistant_early_exit=l)`, LayerSkip's scheme). Per model
and exit layer: the speed-up over plain greedy decoding of the same prompts with a paired interval over prompts,
tokens per second, the acceptance rate of the drafted tokens, and the check that the tokens equal plain greedy
decoding's (greedy speculative decoding must return exactly the full model's tokens).

With reference answers in the instructions (`reference` or `output`), also each layer's own readout of them: per-layer
token accuracy and loss of the answer tokens, teacher-forced, clean and at the `gammas` levels of embedding noise.

Batch size 1: transformers' assisted generation decodes one sequence at a time. Counting is exact and needs no
transformers internals: a forward pre-hook on the model sees every call, the draft's with the model's
`num_hidden_layers` temporarily set to l (how `EarlyExitCandidateGenerator` exits early), the verifier's with L. T
new tokens from V verifying forwards and D drafting forwards: T / V tokens per full-model forward, and (T - V) / D
accepted drafts (each verifying forward adds the one token the full model picks after the accepted drafts).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ...data import ModelSpec, model_identities
from ...noise import embedding_sigma, noise_stream, noisy
from ...readout import CausalLMReadout
from ...tasks import SFTTask, get_task
from ...utils.files import read_json, write_json
from ...utils.output_folders import check_folder, child_path, differences, mark_folder, normalized
from ...utils.types import JSONObject, Kwargs
from ..bootstrap import Statistic, bootstrap_interval
from ..decoding import compiled_decoding
from ..instructions import GenerationError, fingerprint, load_instructions, prompts_for
from ..lengths import Decoding, check_decoding
from ..loading import auto_bf16, reference_sigma, versions
from ..report import Document, write_html
from .arguments import ExitsArguments, check_depths, default_exits
from .report import exits_report, plot_layer_accuracy, plot_speedups
from .results import (
    ExitsFolder,
    ExitsModel,
    ExitSpeedup,
    ExitsResults,
    ExitsSettings,
    LayerReadout,
    PromptMeasurements,
)


class ForwardCounter:
    """Counts the model's forward calls by the layers they run (`num_hidden_layers` at call time)."""

    def __init__(self, model) -> None:
        self.config = getattr(model, model.base_model_prefix).config
        self.depths: list[int] = []
        self.handle = model.register_forward_pre_hook(self._record, with_kwargs=True)

    def _record(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: Kwargs) -> None:
        self.depths.append(self.config.num_hidden_layers)

    def take(self) -> list[int]:
        depths, self.depths = self.depths, []
        return depths


def _decode(model, enc, max_new_tokens: int, pad_token_id: int, exit_layer: int | None, way: Kwargs):
    """(new token ids, seconds) of one greedy decoding, plain or drafted by layer `exit_layer`; `way`: how it decodes
    (`compiled_decoding`, or {} for eager)."""
    extra = {**way} if exit_layer is None else {**way, "assistant_early_exit": exit_layer}
    start = time.perf_counter()
    out = model.generate(
        **enc,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        temperature=None,
        top_p=None,
        top_k=None,
        pad_token_id=pad_token_id,
        **extra,
    )
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out[0, enc["input_ids"].shape[1] :], time.perf_counter() - start


@torch.no_grad()
def measure_model(
    model, tokenizer, prompts: list[str], exits: list[int], max_new_tokens: int, desc: str, compile: bool = False
) -> PromptMeasurements:
    """
    Per prompt: plain greedy decoding, then each exit layer's self-speculative decoding of the same prompt (one untimed
    warm-up decode first; `compile`: one full decode of the first prompt per way, which compiles its steps): N plain
    seconds and new-token counts, and per exit layer N drafted seconds, drafting and verifying forwards and
    identical-to-greedy flags.
    """
    model.eval()
    device = next(model.parameters()).device
    L = getattr(model, model.base_model_prefix).config.num_hidden_layers
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    encoded = [tokenizer(p, return_tensors="pt", add_special_tokens=False).to(device) for p in prompts]
    cache_len = max(e["input_ids"].shape[1] for e in encoded) + max_new_tokens
    way = compiled_decoding(device, cache_len) if compile else {}
    for layer in [None, *exits] if compile else [None]:  # warm-up: allocations (and compiles) are not timed
        _decode(model, encoded[0], max_new_tokens if compile else 2, pad, layer, way)
    counter = ForwardCounter(model)
    keys = ("seconds", "drafted", "verified", "identical")
    out = PromptMeasurements([], [], {x: {k: [] for k in keys} for x in exits})
    try:
        for enc in tqdm(encoded, desc=desc):
            plain, seconds = _decode(model, enc, max_new_tokens, pad, None, way)
            counter.take()
            out.plain_seconds.append(seconds)
            out.tokens.append(int(plain.numel()))
            for layer in exits:
                drafted_ids, seconds = _decode(model, enc, max_new_tokens, pad, layer, way)
                depths = counter.take()
                row = out.exits[layer]
                row["seconds"].append(seconds)
                row["drafted"].append(sum(d < L for d in depths))
                row["verified"].append(sum(d >= L for d in depths))
                row["identical"].append(bool(torch.equal(drafted_ids, plain)))
    finally:
        counter.handle.remove()
    return out


@torch.no_grad()
def layer_view(
    model, tokenizer, prompts: list[str], answers: list[str], gammas: list[float], sigma: float
) -> dict[float, LayerReadout]:
    """
    Each layer's readout of the reference answers, teacher-forced, one prompt at a time: per level, each layer's mean
    NLL and top-1 share over every answer token, layers 1..L (L as the model scores itself, below it
    through the final norm and head: the readout the constraints train). Noise seeded per prompt.
    """
    model.eval()
    device = next(model.parameters()).device
    readout = CausalLMReadout.from_model(model)
    out = {}
    for gamma in gammas:
        nll_rows: list[torch.Tensor] = []  # per prompt: [L] summed NLL, then [L] top-1 hits, of its answer tokens
        hit_rows: list[torch.Tensor] = []
        count = 0
        for i, (prompt, answer) in enumerate(zip(prompts, answers, strict=True)):
            head = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            tail = tokenizer(answer, add_special_tokens=False)["input_ids"]
            ids = torch.tensor([head + tail], device=device)  # [1, T]
            with noisy(model, gamma, noise_stream(model, i), sigma=sigma):
                hidden = model(input_ids=ids, output_hidden_states=True).hidden_states  # L + 1 of [1, T, D]
            positions = torch.arange(len(head) - 1, ids.shape[1] - 1, device=device)  # predict each answer token
            targets = ids[0, positions + 1]  # [K]
            L = len(hidden) - 1
            rows_nll, rows_hit = [], []
            for layer in range(1, L + 1):
                h = hidden[layer][0, positions]  # [K, D]
                rows_nll.append(readout.token_nll(h, targets, apply_norm=layer < L).double().sum())
                x = readout.final_norm(h) if layer < L and readout.final_norm is not None else h
                rows_hit.append((readout.lm_head(x).argmax(-1) == targets).double().sum())  # [K, V] logits, small K
            nll_rows.append(torch.stack(rows_nll))
            hit_rows.append(torch.stack(rows_hit))
            count += int(targets.numel())
        nll, hits = torch.stack(nll_rows).sum(0), torch.stack(hit_rows).sum(0)  # [L] each
        layers = range(1, len(nll) + 1)
        out[float(gamma)] = LayerReadout(
            loss={x: float(v) / count for x, v in zip(layers, nll.tolist(), strict=True)},
            accuracy={x: float(v) / count for x, v in zip(layers, hits.tolist(), strict=True)},
        )
    return out


def summarize_exits(measured: PromptMeasurements, n_boot: int) -> dict[int, ExitSpeedup]:
    """Per exit layer: speed-up (plain / drafted seconds, pooled over prompts) with its 95% interval over prompts,
    tokens per second, acceptance rate, tokens per full-model forward, and whether every prompt decoded identically."""
    plain = np.asarray(measured.plain_seconds, np.float64)
    tokens = np.asarray(measured.tokens, np.float64)
    out = {}
    for layer, row in measured.exits.items():
        seconds = np.asarray(row["seconds"], np.float64)
        scores = {"plain": plain[None, None], "drafted": seconds[None, None]}  # [K=1, S=1, N prompts]
        speedup = Statistic("speedup", lambda s: s["plain"] / s["drafted"])
        value, low, high = bootstrap_interval(scores, speedup, n_boot)
        drafted, verified = sum(row["drafted"]), sum(row["verified"])
        out[int(layer)] = ExitSpeedup(
            speedup=float(value[0]),
            speedup_low=float(low[0]),
            speedup_high=float(high[0]),
            tokens_per_second=float(tokens.sum() / seconds.sum()),
            acceptance_rate=float((tokens.sum() - verified) / drafted) if drafted else math.nan,
            tokens_per_verify=float(tokens.sum() / verified) if verified else math.nan,
            identical_to_greedy=all(row["identical"]),
        )
    return out


COMMAND = "eval exits"
ROWS = "rows"  # <output_dir>/rows/<model>.json: each model's measurements, reused by a rerun of the same settings


def saved_rows(output_dir: str, keys: dict[str, JSONObject]) -> dict[str, dict]:
    """{model: its saved row} for the models whose row was measured from the same weights at the same noise scale
    (`keys`); a row of another model behind the same name is refused, naming it."""
    out = {}
    for name, key in keys.items():
        path = child_path(output_dir, ROWS, f"{name}.json")
        if not os.path.isfile(path):
            continue
        row = read_json(path, "--output_dir", GenerationError)
        if not isinstance(row, dict) or row.get("key") != normalized(key):
            saved = row.get("key", {}) if isinstance(row, dict) else {}
            raise GenerationError(
                f"`--output_dir` {path} was measured from another model behind the name {name!r} or at another noise "
                f"scale ({differences(saved, normalized(key))}); give another --output_dir or another --names."
            )
        out[name] = row
    return out


def run(args: ExitsArguments) -> ExitsResults:
    """Every model at every exit layer (a model measured before with the same settings and weights is reused);
    exits.json, the plot and report.html in `args.output_dir`. Every model and the folder are checked first."""
    paths, output_dir = args.validate()
    rows = load_instructions(args.instructions, args.max_instances)
    specs = [ModelSpec(n, p, args.base_model) for n, p in zip(args.model_names(), paths, strict=True)]
    check_depths(args, specs)
    bf16 = args.bf16 if args.bf16 is not None else auto_bf16()
    for spec in specs:  # one prompt a call (assisted decoding), no noise while decoding
        how = Decoding(args.max_new_tokens, 1, args.compile, False, torch.bfloat16 if bf16 else torch.float32)
        check_decoding(spec, rows, args.system_prompt, how)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    settings: JSONObject = {
        k: v for k, v in asdict(args).items() if k not in ("output_dir", "bootstrap_samples", "models", "names")
    }
    settings.update(bf16=bf16, device=device, n_prompts=len(rows), instructions_sha=fingerprint(rows))
    check_folder(output_dir, COMMAND, settings, vouch=lambda key: key == "compile" and not args.compile)
    identities = model_identities([(s.name, s.path) for s in specs])
    sigma = reference_sigma(args.sigma_x, paths[0])[0]
    scale = {"sigma_x": sigma} if sigma is not None else {"sigma_x_measured_on": identities[specs[0].name]}
    keys: dict[str, JSONObject] = {s.name: {"model": identities[s.name], **scale} for s in specs}
    saved = saved_rows(output_dir, keys)
    mark_folder(output_dir, COMMAND, settings)
    models: dict[str, ExitsModel] = {}
    for spec in specs:
        if spec.name in saved:
            models[spec.name] = ExitsModel.from_dict(saved[spec.name]["result"])
            sigma = sigma if sigma is not None else saved[spec.name]["sigma_x"]
            continue
        models[spec.name], sigma = measure_exits(args, spec, rows, sigma, bf16)
        row = {"key": normalized(keys[spec.name]), "sigma_x": sigma, "result": models[spec.name].to_dict()}
        os.makedirs(child_path(output_dir, ROWS), exist_ok=True)
        write_json(child_path(output_dir, ROWS, f"{spec.name}.json"), row)
    return write_exits(args, output_dir, models, rows, sigma, device)


def measure_exits(
    args: ExitsArguments, spec: ModelSpec, rows: list[dict], sigma: float | None, bf16: bool
) -> tuple[ExitsModel, float | None]:
    """One model at every exit layer, and (with reference answers in `rows`) each layer's readout of them at the
    levels of `args.gammas` with `sigma` (None: measured on this model); returns the model's result and the sigma
    used. A study measures each arm's seed-0 model this way right after it trains."""
    model, tokenizer = get_task(SFTTask.name).measuring.load_model(spec, torch.bfloat16 if bf16 else torch.float32)
    model.to("cuda" if torch.cuda.is_available() else "cpu")
    L = getattr(model, model.base_model_prefix).config.num_hidden_layers
    exits = args.exit_layers or default_exits(L)
    if bad := [x for x in exits if not 1 <= x < L]:
        raise GenerationError(f"`--exit_layers` {bad} are outside 1..{L - 1} for {spec.name} ({L} layers).")
    prompts = prompts_for(tokenizer, rows, args.system_prompt)
    measured = measure_model(
        model, tokenizer, prompts, exits, args.max_new_tokens, f"decoding {spec.name}", args.compile
    )
    answers = [r["reference"] for r in rows if r.get("reference")]
    view = None
    if answers and len(answers) == len(rows):  # one scale for every model compared: the first's, recorded or measured
        sigma = sigma if sigma is not None else embedding_sigma(model)
        view = layer_view(model, tokenizer, prompts, answers, sorted(set(args.gammas)), sigma)
    result = ExitsModel(
        path=spec.path,
        num_layers=L,
        plain_tokens_per_second=sum(measured.tokens) / sum(measured.plain_seconds),
        exits=summarize_exits(measured, args.bootstrap_samples),
        per_prompt=measured,
        layers=view,
    )
    return result, sigma


def write_exits(
    args: ExitsArguments,
    output_dir: str,
    models: dict[str, ExitsModel],
    rows: list[dict],
    sigma: float | None,
    device: str,
) -> ExitsResults:
    """exits.json, the plots and report.html in `output_dir` from the measured `models`."""
    description = (
        f"{len(rows)} prompts of {args.instructions}, {args.max_new_tokens} new tokens each, greedy, batch 1 "
        f"(transformers' assisted generation decodes one sequence at a time), on {device}"
        f"{', compiled (static cache, torch.compile)' if args.compile else ''}. Speed-up: plain greedy "
        "seconds / drafted seconds, pooled over the prompts; interval: 95% bootstrap over prompts (paired: each "
        "prompt decoded both ways)."
    )
    given = {**asdict(args), "gammas": sorted(set(args.gammas)), "sigma_x": sigma}
    results = ExitsResults(
        settings=ExitsSettings(**given, n_prompts=len(rows), description=description),
        versions=versions("torch", "transformers"),
        models=models,
    )
    os.makedirs(output_dir, exist_ok=True)
    folder = ExitsFolder(output_dir)
    plot = plot_speedups(results, folder.figure("speedup_vs_exit_layer"))
    results.files = {"json": folder.results_json, "plot": plot}
    if results.has_layer_view:
        results.files["layer_plot"] = plot_layer_accuracy(results, folder.figure("layer_accuracy"))
    page = write_html(folder.page, Document("Exits", exits_report(results)))
    results.files["html"] = page
    write_json(results.files["json"], results.to_dict())
    return results
