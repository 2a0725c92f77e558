"""
The instructions a model answers (`eval generate`, `eval exits`, the study): read from a local JSON / JSONL file or
the AlpacaEval set on the Hub, fingerprinted, and written as the model's chat template writes a user turn. Shared by
the evaluation commands, so none of them imports another.
"""

from __future__ import annotations

import hashlib
import os

from ..utils.files import read_json

ALPACA_EVAL = "tatsu-lab/alpaca_eval"  # 805 instructions (results.ALPACA_EVAL_SIZE)


class GenerationError(ValueError):
    """Bad generation input: the message names the field or file and what is allowed."""


def _rows_from_file(path: str) -> list[dict]:
    data = read_json(path, "--instructions", GenerationError, jsonl=path.endswith(".jsonl"))
    if not isinstance(data, list):
        raise GenerationError(f"{path}: expected a JSON list of objects with an `instruction` field.")
    return data


def load_instructions(source: str, max_instances: int | None = None) -> list[dict[str, str]]:
    """[{instruction, dataset, reference?}] in file order from a local JSON/JSONL file or the AlpacaEval set on the
    Hub; `reference` (or `output`) is a reference answer, used by the proxy judge."""
    if os.path.isfile(source):
        if not source.endswith((".json", ".jsonl")):
            raise GenerationError(f"`--instructions` {source!r}: allowed local files are .json or .jsonl.")
        rows, default_dataset = _rows_from_file(source), os.path.splitext(os.path.basename(source))[0]
    elif source == ALPACA_EVAL:
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(repo_id=ALPACA_EVAL, filename="alpaca_eval.json", repo_type="dataset")
        rows, default_dataset = _rows_from_file(path), "alpaca_eval"
    else:
        raise GenerationError(
            f"`--instructions` {source!r} is neither a local .json/.jsonl file nor {ALPACA_EVAL!r} (the Hub set)."
        )
    out = []
    for i, row in enumerate(rows):
        text = row.get("instruction") if isinstance(row, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise GenerationError(f"{source}: row {i} has no non-empty string `instruction` field.")
        row_out = {"instruction": text, "dataset": str(row.get("dataset") or default_dataset)}
        reference = row.get("reference", row.get("output"))  # AlpacaEval's rows carry a reference model's `output`
        if isinstance(reference, str) and reference.strip():
            row_out["reference"] = reference
        out.append(row_out)
    if not out:
        raise GenerationError(f"`--instructions` {source}: no instructions; give a non-empty list of {{instruction}}.")
    return out[:max_instances] if max_instances else out


def fingerprint(rows: list[dict[str, str]]) -> str:
    return hashlib.sha256("\x00".join(r["instruction"] for r in rows).encode()).hexdigest()[:16]


def prompts_for(tokenizer, rows: list[dict[str, str]], system_prompt: str | None) -> list[str]:
    """Each instruction as the model's chat template writes a user turn (after an optional system message)."""
    if not getattr(tokenizer, "chat_template", None):
        raise GenerationError("the model's tokenizer has no chat template; generation needs an instruct model.")
    head = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [
        tokenizer.apply_chat_template(
            head + [{"role": "user", "content": r["instruction"]}], tokenize=False, add_generation_prompt=True
        )
        for r in rows
    ]
