"""
Noisy generation (`constrained-sft eval generate`): a model answers instructions with embedding noise at level gamma on every token
(prompt and generated), written in alpaca_eval's format, one file per model and level, resumable.

    constrained-sft eval generate --model outputs/smollm2-135m-sharegpt-constrained --name constrained \\
        --instructions tatsu-lab/alpaca_eval --gammas 0 1.5 --output_dir outputs/alpaca

writes outputs/alpaca/constrained/gamma_0.0.json and gamma_1.5.json (lists of {instruction, output, generator,
dataset}) and settings.json. Each file is rewritten after every batch; a rerun with the same settings skips the
instructions already answered, and since batches and noise seeds are fixed by position, the resumed files equal an
uninterrupted run's.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, replace

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from ...comparison.arm_arguments import check_model_paths, folder_name
from ...data import ModelSpec, model_fingerprint
from ...noise import NoiseGrid, embedding_sigma, noise_stream, noisy_decoding
from ...tasks import SFTTask, get_task
from ...utils.fields import check_fields
from ...utils.files import write_json
from ...utils.output_folders import check_folder, check_output_folder, mark_folder, plain_name, read_marker
from ...utils.types import JSONObject, Kwargs
from ...version import VERSION
from ..decoding import compiled_decoding
from ..instructions import ALPACA_EVAL, GenerationError, fingerprint, load_instructions, prompts_for
from ..lengths import Decoding, check_decoding
from ..loading import auto_bf16, reference_sigma
from .answer_folders import AnswersFolder
from .results import ALPACA_EVAL_SIZE, LevelAnswers


@dataclass
class GenerateArguments:
    model: str | None = field(
        default=None, metadata={"help": "Model folder, Hub id, `pkg:` alias or LoRA adapter folder."}
    )
    output_dir: str | None = field(default=None, metadata={"help": "Writes <output_dir>/<name>/gamma_<g>.json."})
    name: str | None = field(
        default=None, metadata={"help": "Generator name in the files and the folder (default: the model folder name)."}
    )
    base_model: str | None = field(default=None, metadata={"help": "Base model of an adapter that does not name one."})
    instructions: str = field(
        default=ALPACA_EVAL,
        metadata={"help": "`tatsu-lab/alpaca_eval` (Hub) or a local .json/.jsonl file with an `instruction` field."},
    )
    max_instances: int | None = field(default=None, metadata={"help": "Answer only the first N instructions."})
    gammas: list[float] = field(default_factory=lambda: [0.0], metadata={"help": "Noise levels, one file each."})
    noise_mean: float = field(default=0.0, metadata={"help": "Mean of the embedding noise."})
    sigma_x: float | None = field(
        default=None,
        metadata={
            "help": "sigma_x of the noise (default: `noise_sigma_x` in the model's constraints.json, the starting "
            "model's scale its training used; else measured on the model). Give the same value to every model "
            "you compare."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seeds the noise (and sampling) of every batch."})
    batch_size: int = field(default=8, metadata={"help": "Instructions per generate() call (left-padded)."})
    max_new_tokens: int = field(default=512, metadata={"help": "Longest answer, in tokens."})
    do_sample: bool = field(default=False, metadata={"help": "Sample instead of greedy decoding (the default)."})
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature (with --do_sample)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (with --do_sample)."})
    system_prompt: str | None = field(default=None, metadata={"help": "A system message before each instruction."})
    bf16: bool | None = field(default=None, metadata={"help": "bf16 weights (default: on CUDA devices with bf16)."})
    compile: bool = field(
        default=False,
        metadata={
            "help": "Compiled decoding: a static KV cache and a torch.compile'd step (transformers'), the noise drawn "
            "ahead of the steps, the same greedy tokens. The first batch pays the compile (40-80 s on 2 CPU cores); "
            "on CPU it pays only at small batches over many of them (docs/guides/performance.md)."
        },
    )

    def __post_init__(self) -> None:
        check_fields(self)
        check_output_folder(self.output_dir, "--output_dir")

    def validate(self) -> tuple[str, str]:
        """Every setting checked before any work; (`--model`, `--output_dir`), the two that have no default."""
        if not self.model or not self.output_dir:
            raise GenerationError("`--model` and `--output_dir` are required.")
        check_model_paths([self.model], "--model")
        NoiseGrid.parse(self.gammas)
        if self.name is not None:
            plain_name(self.name, "--name", GenerationError)
        if self.sigma_x is not None and not (math.isfinite(self.sigma_x) and self.sigma_x > 0):
            raise GenerationError(f"`--sigma_x` must be a finite number > 0, got {self.sigma_x}.")
        for name in ("batch_size", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise GenerationError(f"`--{name}` must be >= 1, got {getattr(self, name)}.")
        if self.max_instances is not None and self.max_instances < 1:
            raise GenerationError(f"`--max_instances` must be >= 1 or unset, got {self.max_instances}.")
        if self.do_sample and not (self.temperature > 0 and 0 < self.top_p <= 1):
            raise GenerationError(f"need temperature > 0 and top_p in (0, 1], got {self.temperature}, {self.top_p}.")
        return self.model, self.output_dir


RESUME_KEYS = (  # what fixes an answer: the same values are required to resume
    "model", "model_fingerprint", "base_model", "instructions", "instructions_sha", "noise_mean", "sigma_x", "seed",
    "batch_size", "max_new_tokens", "do_sample", "temperature", "top_p", "system_prompt", "generator", "compile",
    "noise_draws",
)  # fmt: skip
# How a batch's noise is drawn: every slot of its prompts and new tokens at once, before decoding (`noisy_decoding`)
NOISE_DRAWS = "per slot, before decoding"


@dataclass(frozen=True)
class AddedKey:
    """A resume key that folders of earlier versions lack: what those versions did instead (`before`), and the value
    that does the same now (`earlier`; None: none does, such a folder is not continued)."""

    before: str
    earlier: object = None


ADDED = {  # every resume key added since the first folders were written (2026-11-22), each named in its refusal
    "model_fingerprint": AddedKey("did not record which weights answered, so they cannot be checked"),
    "compile": AddedKey("decoded eagerly", earlier=False),
    "noise_draws": AddedKey("drew the noise call by call as it decoded, not every slot ahead of decoding"),
}
COMMAND = "eval generate"  # one folder per `--name` below its --output_dir, each with its settings.json


def _settings(args: GenerateArguments, model: str, rows: list[dict[str, str]], name: str) -> JSONObject:
    settings = {k: v for k, v in asdict(args).items() if k not in ("output_dir", "name", "gammas", "bf16")}
    return {
        **settings,
        "model_fingerprint": model_fingerprint(model),
        "generator": name,
        "noise_draws": NOISE_DRAWS,
        "n_instructions": len(rows),
        "instructions_sha": fingerprint(rows),
        # the condition for alpaca_eval's length-controlled win rate (fitted on that set, in that order)
        "is_full_alpaca_eval": args.instructions == ALPACA_EVAL and len(rows) == ALPACA_EVAL_SIZE,
    }


def _check_resume(path: str, settings: JSONObject, measured_later: tuple[str, ...] = ()) -> None:
    """A generator folder's saved settings must equal these (`measured_later`: keys not known yet, compared once
    known), else the answers would mix two runs; a folder of an earlier version is refused naming it and what it did
    (`earlier_version`)."""
    if not os.path.isfile(path):
        return
    with open(path) as f:
        old = json.load(f)
    earlier_version(path, old, settings)
    known = [k for k in RESUME_KEYS if k not in measured_later and (k in old or k not in ADDED)]  # ADDED: checked
    if changed := [k for k in known if old.get(k) != settings[k]]:
        raise GenerationError(
            f"{path} was written with other settings ({', '.join(f'{k}: {old.get(k)!r}' for k in changed)}); "
            "use another --output_dir or --name, or the same settings to resume."
        )


def earlier_version(path: str, old: JSONObject, settings: JSONObject) -> None:
    """A generator folder whose settings lack keys added since (`ADDED`) was written by an earlier version: continued
    where what it did is what these settings do, else refused naming the version, what it did and what to do."""
    lacking = {k: a for k, a in ADDED.items() if k not in old}
    if not (refused := {k: a for k, a in lacking.items() if a.earlier is None or a.earlier != settings[k]}):
        return
    folder = os.path.dirname(path)
    entry = (read_marker(os.path.dirname(folder), "--output_dir") or {}).get(COMMAND)
    version = entry.get("version") if isinstance(entry, dict) else None
    who = f"an earlier build of constrained-sft {version}" if version == VERSION else f"constrained-sft {version}"
    did = "; ".join(f"{a.before} (its settings.json has no `{k}`)" for k, a in refused.items())
    fixes = [f"`--{k} {json.dumps(a.earlier)}`" for k, a in refused.items() if a.earlier is not None]
    todo = (
        f"continue it with {' '.join(fixes)}, or" if len(fixes) == len(refused) else "its answers cannot be continued:"
    )
    raise GenerationError(
        f"{folder} was written by {who if version else 'an earlier version'}, which {did}; {todo} give a new "
        f"`--output_dir` or `--name`, or remove {folder} to answer again with this version."
    )


def cache_length(tokenizer: PreTrainedTokenizerBase, rows: list[dict[str, str]], args: GenerateArguments) -> int:
    """Positions a batch of `rows` needs at most: the longest prompt's tokens plus `max_new_tokens` (one static cache
    and one noise bank shape for the whole run: `compiled_decoding`, `noisy_decoding`)."""
    prompts = prompts_for(tokenizer, rows, args.system_prompt)
    return max(map(len, tokenizer(prompts, add_special_tokens=False)["input_ids"])) + args.max_new_tokens


@torch.no_grad()
def generate_level(
    model, tokenizer, rows, args: GenerateArguments, name: str, gamma: float, path: str, cache_len: int
) -> list:
    """Answers for one noise level; resumes from `path` and rewrites it after every batch. `cache_len`:
    `cache_length` of every row."""
    done: list[dict] = []
    if os.path.isfile(path):
        with open(path) as f:
            done = json.load(f)
        if [d["instruction"] for d in done] != [r["instruction"] for r in rows[: len(done)]]:
            raise GenerationError(
                f"{path} holds {len(done)} answers that are not to the first {len(done)} of the {len(rows)} "
                "instructions asked for; remove it or use another --output_dir."
            )
    # restart at a batch boundary so every batch is reproduced (a complete file is left alone)
    start = len(done) if len(done) >= len(rows) else len(done) - len(done) % args.batch_size
    done = done[:start]
    device = next(model.parameters()).device
    for b in tqdm(range(start, len(rows), args.batch_size), desc=f"{name} gamma={gamma}"):
        batch = rows[b : b + args.batch_size]
        enc = tokenizer(
            prompts_for(tokenizer, batch, args.system_prompt),
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
        ).to(device)
        seed = args.seed * 1_000_003 + b  # a function of the position only: resumed batches see the same noise
        torch.manual_seed(seed)
        decoding: Kwargs = {"do_sample": args.do_sample, "max_new_tokens": args.max_new_tokens}
        if args.do_sample:
            decoding.update(temperature=args.temperature, top_p=args.top_p)
        else:
            decoding.update(temperature=None, top_p=None, top_k=None)
        if args.compile:
            decoding.update(compiled_decoding(device, cache_len))
        stream = noise_stream(model, seed)
        mask, new = enc["attention_mask"], args.max_new_tokens
        with noisy_decoding(model, gamma, stream, mask, new, args.noise_mean, args.sigma_x, slots=cache_len):
            out = model.generate(**enc, pad_token_id=tokenizer.pad_token_id, **decoding)  # [B, T_prompt + new]
        answers = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        done += [
            {"instruction": r["instruction"], "output": a.strip(), "generator": name, "dataset": r["dataset"]}
            | ({"reference": r["reference"]} if "reference" in r else {})
            for r, a in zip(batch, answers, strict=True)
        ]
        write_json(path, done)
    write_json(path, done)
    return done


def run(args: GenerateArguments) -> dict[float, LevelAnswers]:
    """Answers at every level into <output_dir>/<name>/, each level's as written (`LevelAnswers`); the folder, the
    instructions and a generator folder of the same name (its settings and model) are checked before the model
    loads."""
    model_path, output_dir = args.validate()
    rows = load_instructions(args.instructions, args.max_instances)
    name = args.name or folder_name(model_path, "--name")
    check_folder(output_dir, COMMAND, {})
    args = replace(args, sigma_x=reference_sigma(args.sigma_x, model_path)[0])  # else measured below
    folder, saved = AnswersFolder(output_dir).model(name), AnswersFolder(output_dir).settings(name)
    later = ("sigma_x",) if args.sigma_x is None else ()
    _check_resume(saved, _settings(args, model_path, rows, name), later)
    bf16 = args.bf16 if args.bf16 is not None else auto_bf16()
    spec = ModelSpec(name, model_path, args.base_model, "--model")
    noisy = any(g > 0 for g in NoiseGrid.parse(args.gammas))
    dtype = torch.bfloat16 if bf16 else torch.float32
    check_decoding(
        spec, rows, args.system_prompt, Decoding(args.max_new_tokens, args.batch_size, args.compile, noisy, dtype)
    )
    model, tokenizer = get_task(SFTTask.name).measuring.load_model(spec, dtype)
    if args.sigma_x is None:
        args = replace(args, sigma_x=embedding_sigma(model))
    settings = _settings(args, model_path, rows, name)
    _check_resume(saved, settings)
    mark_folder(output_dir, COMMAND, {})
    model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    os.makedirs(folder, exist_ok=True)
    write_json(saved, settings)
    levels: dict[float, LevelAnswers] = {}
    cache_len = cache_length(tokenizer, rows, args)
    for gamma in NoiseGrid.parse(args.gammas):
        path = AnswersFolder(output_dir).answers(name, gamma)
        done = generate_level(model, tokenizer, rows, args, name, gamma, path, cache_len)
        levels[gamma] = LevelAnswers(gamma, path, len(done), sum(not r["output"].strip() for r in done))
    return levels
