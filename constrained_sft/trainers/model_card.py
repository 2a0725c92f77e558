"""
The model card (`README.md`) of a constrained run, as TRL writes one beside every checkpoint: the base model, the
data, the objective, the dual optimizer, the feasibility verdict and the per-layer table of `constraints.json`, the
training noise, the versions and the paper's citation, with the tags `constrained-sft` and the objective. Rendered
through huggingface_hub's `ModelCard.from_template` (the machinery of TRL's `generate_model_card`) from
`templates/model_card.md`; `Trainer.push_to_hub` uploads it with the output folder, `constraints.json` included.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from huggingface_hub import ModelCard, ModelCardData

from ..constraints import MODES
from ..constraints.feasibility import FeasibilityReport, verdict_message
from ..utils.content import sha256
from ..utils.files import write_text
from ..utils.shipped import package_data
from ..utils.types import JSONObject
from ..utils.written_record import WRITER, check_record, plain_file, read_record, record_written
from ..version import VERSION

TEMPLATE = str(package_data("trainers", "templates", "model_card.md"))
CARD = "README.md"
CARD_BESIDE = "MODEL_CARD.md"  # where the card goes when README.md is the user's own
CARD_NAMES = (CARD, CARD_BESIDE)
MARK = "<!-- written by constrained-sft: "  # the template's first line after the metadata
# the intro of every card, earlier versions' included: with the citation, what an earlier version's card holds
LEGACY_TEXT = ("Trained with constrained-sft", "A Constrained Optimization Perspective of Unrolled Transformers")


class CardPathError(ValueError):
    """No place for the run's model card: both names hold the user's files."""


def card_path(folder: str) -> str:
    """
    Where the run's card goes in the output folder `folder`: the first of README.md and MODEL_CARD.md that is absent,
    a card this library wrote there and nobody edited since (the folder's record, `utils.written_record`), or an earlier
    version's card that is still as written (`earlier_card`). Anything else at a name (the user's README, a card the
    user edited, a symlink, a folder) is the user's and never replaced: the card goes beside it, and where both names
    are the user's, `CardPathError` (raised before training: `check_card_path`).
    """
    for name in CARD_NAMES:
        path = os.path.join(folder, name)
        if not os.path.lexists(path) or ours(folder, name) or earlier_card(folder, name):
            return path
    raise CardPathError(
        f"`output_dir` {folder} holds a {CARD} and a {CARD_BESIDE} this library did not write (or that were edited "
        "since it did, or are links or folders): the run's model card would replace one of them. Move one away, or "
        "choose another `output_dir`."
    )


def ours(folder: str, name: str) -> bool:
    """`folder`/`name` is a plain file with the bytes of a card this library wrote into `folder` (under either name: a
    card renamed by hand is still the card)."""
    writer, files = read_record(folder)
    if writer != WRITER or not plain_file(folder, name):
        return False
    return sha256(os.path.join(folder, name)) in {files.get(n) for n in CARD_NAMES}


def earlier_card(folder: str, name: str) -> bool:
    """Whether `folder`/`name` is a card an earlier version wrote (no record lists it) and nobody edited: a plain
    file with the card's text, equal to the card that version wrote into one of the run's checkpoints at the same
    save (TRL writes the output folder's card as it saves a checkpoint, and the checkpoint's is never edited)."""
    path = os.path.join(folder, name)
    if os.path.islink(path) or not os.path.isfile(path) or read_record(folder)[1].get(name):
        return False
    with open(path, "rb") as f:
        text = f.read()
    if not all(part.encode() in text for part in LEGACY_TEXT):
        return False
    copies = [os.path.join(folder, c, CARD) for c in os.listdir(folder) if c.startswith("checkpoint-")]
    return any(os.path.isfile(c) and not os.path.islink(c) and open(c, "rb").read() == text for c in copies)


def check_card_path(folder: str) -> None:
    """`card_path`'s refusal, before any work: the folder must have room for the run's card, and its record of what
    was written there must be this library's (a `.written-by.json` of the user's, or a folder of that name, is refused:
    the card's record would replace it)."""
    if os.path.isdir(folder):
        check_record(folder, "output_dir", WRITER, writes_over=False)
        card_path(folder)


def save_card(card: ModelCard, folder: str, record: bool) -> str:
    """Write `card` where `card_path` says (`record`: in an output folder, noted in its record so that a later
    save recognises it, and an edit of the user's since); its path."""
    path = card_path(folder) if record else os.path.join(folder, CARD)
    write_text(path, str(card))
    if record:
        record_written(folder, WRITER, [os.path.basename(path)])
    return path


CITATION = """@misc{porrasvalenzuela-constrained-unrolled-transformers,
  title  = {A Constrained Optimization Perspective of Unrolled Transformers},
  author = {Porras-Valenzuela, Javier and Hadou, Samar and Ribeiro, Alejandro},
  note   = {University of Pennsylvania}
}"""
VERSIONS = ("transformers", "trl", "torch", "datasets")


def _number(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _versions() -> list[tuple[str, str]]:
    found = [("constrained-sft", VERSION)]
    for name in VERSIONS:
        with contextlib.suppress(PackageNotFoundError):
            found.append((name, version(name)))
    return found


def _data(data: JSONObject | None) -> tuple[str, str | None]:
    """(what the run trained on, a Hub dataset id for the card's metadata) from the run's identity."""
    if not data:
        return "not recorded (a trainer built in Python is given rows, not a dataset name)", None
    name = data.get("dataset_name") or data.get("data_dir") or data.get("video_dir")
    parts = [f"`{name}`"] if name else []
    parts += [f"{k} `{v}`" for k in ("dataset_config", "dataset_train_split") if (v := data.get(k))]
    hub = name if isinstance(name, str) and "/" in name and not os.path.exists(name) else None
    return ", ".join(parts) or "recorded in run.json", hub


def layer_rows(report: FeasibilityReport) -> list[dict[str, str]]:
    """One row per constrained layer: its mean loss, its constraint, slack, multiplier and whether it holds."""
    rows, layers, alphas = [], report.layers, report.alpha
    for i, layer in enumerate(layers):
        key = str(layer)
        if key not in report.dual:
            constraint = "-"
        elif i == 0:
            constraint = f"f_{layer} <= epsilon = {_number(report.epsilon)}"
        else:
            constraint = f"f_{layer} <= {_number(1 - alphas[i - 1])} f_{layers[i - 1]}"
        holds = report.holds.get(key)
        rows.append(
            {
                "layer": key,
                "loss": _number(report.layer_loss.get(key)),
                "constraint": constraint,
                "slack": _number(report.slack.get(key)) if key in report.slack else "-",
                "dual": _number(report.dual.get(key)) if key in report.dual else "-",
                "holds": "-" if holds is None else ("yes" if holds else "**no**"),
            }
        )
    return rows


def verdict(report: FeasibilityReport) -> str:
    """The feasibility verdict in one paragraph (`constraints.feasibility.verdict_message`, and the cases it leaves
    silent: every constraint holding strictly, and an unconstrained run)."""
    held, total = sum(report.holds.values()), len(report.holds)
    steps = report.window_steps
    where = f"over optimizer steps {steps[0]}-{steps[1]}" if steps else "(no optimizer step recorded)"
    if not report.constraints:
        return f"Trained without constraints; measured: {held} of {total} descent constraints hold {where}."
    message = verdict_message(report)
    if message is None:
        return f"**Feasible**: all {total} descent constraints hold {where}."
    text = message[1].removeprefix("Constrained training ended infeasible. ")
    return ("**Feasible**: " if report.feasible else "**Infeasible**: ") + text


def model_card(
    report: FeasibilityReport,
    args: Any,
    model_source: str | None,
    data: JSONObject | None,
    model_name: str,
    tags: Sequence[str] = (),
) -> ModelCard:
    """The card of a run from its feasibility report and its training arguments."""
    objective = getattr(args, "constraints", "descent")
    mode = MODES.get(objective)
    tag, what = (mode.card_tag, mode.card_text) if mode else (objective, f"with objective `{objective}`")
    hub_model = model_source if model_source and "/" in model_source and not os.path.exists(model_source) else None
    base = (
        f"[{hub_model}](https://huggingface.co/{hub_model})"
        if hub_model
        else (f"`{model_source}`" if model_source else "a model built in code")
    )
    data_text, hub_data = _data(data)
    enforced = report.constraints and report.enforced
    dual = (
        f"{report.dual_optimizer or args.dual_optimizer}, dual_lr {args.dual_lr:g}, resilience {args.resilience:g}"
        if enforced
        else "none (no dual ascent)"
    )
    neftune = getattr(args, "neftune_noise_alpha", None)
    gamma, sigma = report.noise_gamma or 0.0, report.noise_sigma_x
    if isinstance(gamma, (list, tuple)):  # a range: each example draws its level uniformly from it
        level = f"gamma uniform in [{', '.join(f'{g:g}' for g in gamma)}]"
    else:
        level = f"gamma {gamma:g}" if isinstance(gamma, (int, float)) else f"gamma {gamma}"
    mean = getattr(args, "noise_mean", 0.0)
    noise = f"{level} x sigma_x {_number(sigma)} on the input embeddings, mean {mean:g}" if gamma else "none (gamma 0)"
    procedure = [
        ("base model", base),
        ("data", data_text),
        ("objective", f"`{objective}`" + (f" with NEFTune (alpha {neftune:g})" if neftune else "")),
        ("dual optimizer", dual),
        ("constrained layers", ", ".join(map(str, report.layers)) or "-"),
        ("descent factor alpha", ", ".join(sorted({f"{a:g}" for a in report.alpha})) or "-"),
        ("training noise", noise),
        ("optimizer steps", str(report.global_step if report.global_step is not None else "-")),
        ("descent share", _number(report.descent_fraction, 3)),
    ]
    steps = report.window_steps
    card_data = ModelCardData(
        base_model=hub_model,
        datasets=[hub_data] if hub_data else None,
        library_name="transformers",
        model_name=model_name,
        tags=list(dict.fromkeys(["constrained-sft", tag, *tags, "generated_from_trainer"])),
    )
    return ModelCard.from_template(
        card_data,
        template_path=TEMPLATE,
        model_name=model_name,
        intro=f"This model is {base} fine-tuned {what}. Trained with constrained-sft {VERSION} (`pip install constrained-sft`).",
        procedure=procedure,
        verdict=verdict(report),
        layer_rows=layer_rows(report),
        window=f"optimizer steps {steps[0]}-{steps[1]}" if steps else "none",
        versions=_versions(),
        citation=CITATION,
    )
