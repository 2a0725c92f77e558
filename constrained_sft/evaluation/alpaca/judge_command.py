"""
AlpacaEval judging (`constrained-sft eval alpaca`): head-to-head judging of two models' noisy generations at each
noise level, the constrained model as "model" and its ERM twin as "reference", as in the paper's Section 6.

    constrained-sft eval alpaca --generations outputs/alpaca --model constrained --reference erm \\
        --judge gpt5 --output_dir outputs/robustness

reads <generations>/<model>/gamma_<g>.json and <generations>/<reference>/gamma_<g>.json (from `eval generate`),
judges every pair in both orders (`headtohead`), and writes alpaca_eval.json (win rate with its 95% bootstrap
interval, order agreement, LC win rate or why not), alpaca_win_rate.png and an AlpacaEval section of report.html in
--output_dir, with each pair's verdicts (and an alpaca_eval judge's raw annotations) under
<output_dir>/alpaca_eval/gamma_<g>/.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from dataclasses import asdict, dataclass, field

import numpy as np

from ...comparison import CONSTRAINED, ERM
from ...noise import NoiseGrid
from ...utils.fields import check_fields
from ...utils.files import read_json, write_json
from ...utils.output_folders import check_folder, check_output_folder, mark_folder, plain_name
from ...utils.redact import redact_url
from ..instructions import GenerationError
from .annotator_configs import load_alpaca_eval
from .answer_folders import AnswersFolder, VerdictsFolder
from .errors import JudgeError
from .headtohead import AlpacaEvalJudge, Judge, judge_both_orders, lc_annotations, win_rate_level, write_verdicts
from .judge_registry import AnnotatorJudge, AnnotatorSetup, judge_kind, judges_help
from .report import cost_text, write_alpaca
from .results import HeadToHead, WinRateLevel

COMMAND = "eval alpaca"


@dataclass
class AlpacaArguments:
    generations: str | None = field(default=None, metadata={"help": "The --output_dir of `eval generate`."})
    output_dir: str | None = field(default=None, metadata={"help": "Report folder (e.g. the robustness report's)."})
    model: str = field(default=CONSTRAINED, metadata={"help": "Generator folder judged as the model."})
    reference: str = field(default=ERM, metadata={"help": "Generator folder used as the reference."})
    judge: str = field(default="gpt4", metadata={"help": judges_help()})
    judge_model: str | None = field(
        default=None,
        metadata={
            "help": "For --judge local: model folder, Hub id or `pkg:` alias; for --judge gpt5 and openai-compatible: the "
            "model; for --judge "
            "proxy: the sentence encoder (default pkg:all-minilm-l6-v2)."
        },
    )
    judge_batch_size: int = field(
        default=8, metadata={"help": "For --judge local / proxy: prompts (texts) per forward pass."}
    )
    judge_base_url: str | None = field(
        default=None,
        metadata={
            "help": "For --judge openai-compatible: the server's OpenAI API root (e.g. http://localhost:8000/v1 for "
            "vLLM, http://localhost:8080/v1 for llama.cpp's server); reached before any work."
        },
    )
    judge_timeout: float | None = field(
        default=None,
        metadata={
            "help": "For API judges: seconds a request may wait for its answer before the openai client retries it "
            "(twice) and the run stops with one line (default: the client's 600)."
        },
    )
    judge_max_instances: int | None = field(
        default=None,
        metadata={
            "help": "Judge only the first N pairs of each level: a dry run whose report prices a comparison and a full "
            "AlpacaEval level before you pay for one (no LC win rate then)."
        },
    )
    bootstrap_samples: int = field(default=2000, metadata={"help": "Bootstrap resamples of each win-rate interval."})
    gammas: list[float] | None = field(
        default=None, metadata={"help": "Levels to judge (default: every level both generators have)."}
    )
    allow_empty_outputs: bool = field(
        default=False,
        metadata={
            "help": "Judge a set that holds empty answers instead of stopping with an error: an empty answer loses to "
            "any answer without asking the judge, two empty answers draw; the report counts them per level."
        },
    )

    def __post_init__(self) -> None:
        check_fields(self)
        check_output_folder(self.output_dir, "--output_dir")


def load_pair(args: AlpacaArguments, generations: str, gamma: float) -> tuple[list[dict], list[dict]]:
    """Both generators' rows at one level in `generations`, checked to answer the same instructions in the same
    order."""
    rows = []
    for name in (args.model, args.reference):
        path = AnswersFolder(generations).answers(name, gamma)
        if not os.path.isfile(path):
            raise GenerationError(f"{path} does not exist: run `constrained-sft eval generate` for {name} at {gamma}.")
        rows.append(read_json(path, "--generations", GenerationError))
        empty = [i for i, r in enumerate(rows[-1]) if not str(r.get("output", "")).strip()]
        if empty and not args.allow_empty_outputs:
            raise GenerationError(
                f"{path}: {len(empty)} empty output(s), first at row {empty[0]} "
                f"({rows[-1][empty[0]]['instruction'][:60]!r}); regenerate or pass --allow_empty_outputs true."
            )
    model, reference = rows
    a, b = [r["instruction"] for r in model], [r["instruction"] for r in reference]
    if a != b:
        only_a, only_b = set(a) - set(b), set(b) - set(a)
        detail = (
            f"{len(only_a)} only in {args.model}, {len(only_b)} only in {args.reference}"
            if only_a or only_b
            else "the same instructions in another order"
        )
        raise GenerationError(
            f"{args.model} ({len(a)} rows) and {args.reference} ({len(b)} rows) at gamma={gamma} answer different "
            f"instruction sets: {detail}. Generate both with the same --instructions and --max_instances."
        )
    return model, reference


def check_judge_limits(args: AlpacaArguments) -> None:
    """`--judge_timeout` and `--judge_max_instances`, before any work."""
    if args.judge_timeout is not None and not (math.isfinite(args.judge_timeout) and args.judge_timeout > 0):
        raise JudgeError(f"`--judge_timeout` must be a finite number > 0 seconds, got {args.judge_timeout}.")
    if args.judge_max_instances is not None and args.judge_max_instances < 1:
        raise JudgeError(f"`--judge_max_instances` must be >= 1, got {args.judge_max_instances}.")


def judge_setup(args: AlpacaArguments) -> AnnotatorSetup:
    """(annotator config for alpaca_eval, extra annotator kwargs) of a judge that runs through alpaca_eval's
    annotator; fails early on a missing credential (`judge_registry`)."""
    kind = judge_kind(args.judge)
    if not issubclass(kind, AnnotatorJudge):
        raise JudgeError(f"judge {args.judge!r} does not run through alpaca_eval's annotator: it has no config.")
    return kind.setup(args)


def length_controlled(annotations: list[dict], full_set: bool) -> tuple[dict | None, str | None]:
    """alpaca_eval's LC win rate, or why it cannot be computed."""
    if not full_set:
        return None, (
            "LC needs all 805 AlpacaEval instructions in their order (it is fitted with per-instruction "
            "difficulties from the Hub); these generations used another or a partial instruction set"
        )
    try:
        load_alpaca_eval()
        from alpaca_eval.metrics import get_length_controlled_winrate

        lc = get_length_controlled_winrate(annotations, save_weights_dir=None)
    except Exception as error:  # noqa: BLE001 - the Hub file or the GLM fit; report, do not fail the run
        return None, f"alpaca_eval could not compute LC ({type(error).__name__}: {str(error)[:200]})"
    return {"lc_win_rate": lc["length_controlled_winrate"], "lc_standard_error": lc.get("lc_standard_error")}, None


def check_judge(args: AlpacaArguments) -> None:
    """What a judge needs, checked before any work: its limits, credentials and judge model, or the proxy's
    encoder."""
    check_judge_limits(args)
    kind = judge_kind(args.judge)
    kind.check_flags(args)
    kind.check(args)


def build_judge(args: AlpacaArguments, output_dir: str | None) -> Judge:
    """The judge `args` names, checked (credentials, judge model) before any pair is judged; its verdicts cached in
    `output_dir` (the folder `judge_levels` writes into; None: no cache)."""
    return judge_kind(args.judge).build(args, None if output_dir is None else os.path.join(output_dir, JUDGE_CACHE))


JUDGE_CACHE = "annotations_cache.json"  # alpaca_eval's cache of the judge's verdicts, in the judging folder


def judge_level(
    judge: Judge,
    pairs: list[tuple[list[dict], list[dict]]],
    folder: VerdictsFolder,
    n_boot: int,
    full_set: bool,
    gamma: float,
) -> tuple[WinRateLevel, str | None]:
    """Level `gamma`: every (model rows, reference rows) pair (one per training seed) judged in both orders; the win
    rate with its interval, order agreement and LC win rate, and why there is no LC win rate (None when there is one).
    Verdicts go to `folder`'s level."""
    verdicts = []
    for s, (model, reference) in enumerate(pairs):
        v = judge_both_orders(judge, [r["output"] for r in model], [r["output"] for r in reference], model)
        write_verdicts(folder.verdicts(gamma, s), v, model, reference)
        if isinstance(judge, AlpacaEvalJudge):
            write_json(folder.annotations(gamma, s), judge.raw)  # raw completions, both orders
        verdicts.append(v)
    level = win_rate_level(verdicts, n_boot, gamma)
    if not level.judged:
        asked = 2 * sum(len(model) for model, _ in pairs)
        raise JudgeError(
            f"judge {judge.name!r} gave no parseable verdict on any of the {asked} judgements of a level (its raw "
            f"answers: {folder.level(gamma)}); use a stronger judge model."
        )
    per_seed = [length_controlled(lc_annotations(v, *pair), full_set) for v, pair in zip(verdicts, pairs, strict=True)]
    reason = next((r for _, r in per_seed if r), None)
    fits = [fit for fit, _ in per_seed if fit is not None]
    if len(fits) == len(per_seed):  # one LC win rate per training seed pair; their mean (and its SE when there is one)
        level = dataclasses.replace(
            level,
            lc_win_rate=float(np.mean([fit["lc_win_rate"] for fit in fits])),
            lc_standard_error=fits[0]["lc_standard_error"] if len(fits) == 1 else None,
        )
    return level, reason


def judge_levels(
    judge: Judge, pairs: dict[float, list], output_dir: str, args: AlpacaArguments, full_set: bool
) -> HeadToHead:
    """Every level of `pairs` ({gamma: [(model rows, reference rows) per seed pair]}) judged (`judge_level`), verdicts
    under <output_dir>/gamma_<g>/."""
    levels, reason = [], None
    for gamma, seed_pairs in pairs.items():
        folder = VerdictsFolder(output_dir)
        level, reason = judge_level(judge, seed_pairs, folder, args.bootstrap_samples, full_set, float(gamma))
        levels.append(level)
    cost = getattr(judge, "cost", None)  # an API judge's; the others pay nothing
    return HeadToHead(
        model=args.model,
        reference=args.reference,
        judge=args.judge,
        judge_config=judge.name,
        judge_is_proxy=judge.proxy,
        judge_model=args.judge_model or judge_kind(args.judge).default_model,
        levels=levels,
        bootstrap_samples=args.bootstrap_samples,
        lc_missing_reason=reason,
        cost=cost() if cost is not None else None,
    )


def _full_alpaca_eval(generations: str, names: tuple[str, str]) -> bool:
    """Whether both generators answered the whole AlpacaEval set in order (settings.json of `eval generate`)."""
    for name in names:
        path = AnswersFolder(generations).settings(name)
        if not os.path.isfile(path):
            return False
        with open(path) as f:
            if not json.load(f).get("is_full_alpaca_eval"):
                return False
    return True


def run(args: AlpacaArguments) -> HeadToHead:
    if not args.generations or not args.output_dir:
        raise GenerationError("`--generations` and `--output_dir` are required.")
    if not os.path.isdir(args.generations):
        raise GenerationError(
            f"`--generations` {args.generations} is not a folder: give the --output_dir of `constrained-sft eval "
            "generate`."
        )
    plain_name(args.model, "--model", GenerationError)
    plain_name(args.reference, "--reference", GenerationError)
    if args.model == args.reference:
        raise GenerationError(f"`--model` and `--reference` must differ, both are {args.model!r}.")
    if args.bootstrap_samples < 1:
        raise GenerationError(f"`--bootstrap_samples` must be >= 1, got {args.bootstrap_samples}.")
    check_judge(args)  # a missing credential, judge model or encoder fails before any file is read
    answers = AnswersFolder(args.generations)
    common = sorted(set(answers.levels(args.model)) & set(answers.levels(args.reference)))
    gammas = sorted(NoiseGrid.parse(args.gammas, "--gammas")) if args.gammas else common
    if not gammas:
        raise GenerationError(
            f"no level has generations of both `--model` {args.model} and `--reference` {args.reference} in "
            f"{args.generations} (it has {sorted(os.listdir(args.generations))}); run `constrained-sft eval generate` "
            "for both, or name generators that exist."
        )
    # every level checked before any is judged
    pairs = {gamma: [load_pair(args, args.generations, gamma)] for gamma in gammas}
    n = args.judge_max_instances
    pairs = {gamma: [(m[:n], r[:n]) for m, r in seed_pairs] for gamma, seed_pairs in pairs.items()}
    settings = {k: v for k, v in asdict(args).items() if k not in ("output_dir", "bootstrap_samples", "judge_timeout")}
    settings.update(generations=os.path.abspath(args.generations), gammas=gammas)
    settings["judge_base_url"] = redact_url(args.judge_base_url)  # recorded and compared without its secrets
    check_folder(args.output_dir, COMMAND, settings)
    mark_folder(args.output_dir, COMMAND, settings)
    root = os.path.join(args.output_dir, "alpaca_eval")
    judge = build_judge(args, root)
    full_set = _full_alpaca_eval(args.generations, (args.model, args.reference)) and n is None
    out = judge_levels(judge, pairs, root, args, full_set)
    out.files = write_alpaca(out, args.output_dir)
    return out


def quiet_alpaca_eval() -> None:
    """Import alpaca_eval, which sets the root logger to INFO, and set it back to WARNING so output stays readable."""
    load_alpaca_eval()
    logging.getLogger().setLevel(logging.WARNING)


def result_lines(result: HeadToHead) -> list[str]:
    """What a judging run prints: the win rate at each level with its interval and the judge's order agreement, why
    LC is missing if it is, the report's path."""
    proxy = " [proxy judge: not a quality judgement]" if result.judge_is_proxy else ""
    lines = []
    for r in result.levels:
        lc = "" if r.lc_win_rate is None else f", LC {r.lc_win_rate:.1f}%"
        agreement = "-" if r.order_agreement is None else f"{r.order_agreement:.2f}"
        lines.append(
            f"gamma={r.gamma}: {result.model} beats {result.reference} {r.win_rate:.1f}% [{r.low:.1f}, {r.high:.1f}] "
            f"(95% bootstrap; {r.n_verdicts} verdicts, both orders; order agreement {agreement}){lc}{proxy}"
        )
    if result.lc_missing_reason:
        lines.append(f"no length-controlled win rate: {result.lc_missing_reason}")
    if cost := cost_text(result.cost):
        lines.append(cost)
    lines.append(f"report: {result.files['html']}")
    return lines
