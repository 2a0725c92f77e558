"""
What a person watching the terminal reads. transformers prints every log as a dict, which for a 30-layer model is 90
per-layer keys a step; here each logging step is one line (objective, f_L, feasible and descent fractions, the
largest multiplier and its layer, learning rate, step time) and each evaluation one row per noise level of a small
table. Only the console changes: `report_to` backends and `trainer_state.json` get every metric as before.
"""

from __future__ import annotations

import re
import time
from typing import Any

from ..utils.types import Logs

EVAL_COLUMNS = ("loss", "accuracy", "f_L", "descent", "feasible")
_EVAL_PREFIX = re.compile(r"^(eval|before|test)(?:_gamma_([^_]+))?_(.+)$")


def _num(value: Any, spec: str = ".4g") -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def _last_layer(logs: Logs, prefix: str = "") -> float | None:
    layers = [int(k.rsplit("/", 1)[1]) for k in logs if k.startswith(f"{prefix}layer_loss/")]
    return logs[f"{prefix}layer_loss/{max(layers)}"] if layers else None


def train_line(logs: Logs, step: int, max_steps: int, seconds_per_step: float | None) -> str:
    """One line for a training log: `logs` as `Trainer.log` receives it (loss, layer_loss/*, dual/*, ...)."""
    parts = [f"step {step}/{max_steps}", f"loss {_num(logs.get('loss'))}", f"f_L {_num(_last_layer(logs))}"]
    if "feasible_fraction" in logs:
        parts.append(f"feasible {_num(logs['feasible_fraction'], '.2f')}")
    if "descent_fraction" in logs:
        parts.append(f"descent {_num(logs['descent_fraction'], '.2f')}")
    duals = {k.split("/", 1)[1]: v for k, v in logs.items() if k.startswith("dual/")}
    if duals:
        layer, value = max(duals.items(), key=lambda kv: kv[1])
        parts.append(f"max lambda {_num(value)} (layer {layer})")
    if "learning_rate" in logs:
        parts.append(f"lr {_num(logs['learning_rate'], '.2e')}")
    if seconds_per_step is not None:
        parts.append(f"{seconds_per_step:.2f} s/step")
    return " | ".join(parts)


def eval_rows(logs: Logs) -> list[tuple[str, str, list[str]]]:
    """(prefix, level label, cells in `EVAL_COLUMNS` order) for each evaluation prefix in `logs`."""
    groups: dict[tuple[str, str | None], Logs] = {}
    for key, value in logs.items():
        match = _EVAL_PREFIX.match(key)
        if match:
            groups.setdefault((match.group(1), match.group(2)), {})[match.group(3)] = value
    rows = []
    for (prefix, gamma), metrics in groups.items():
        accuracy = metrics.get("mean_token_accuracy", metrics.get("accuracy"))
        cells = [metrics.get("loss"), accuracy, _last_layer(metrics)]
        cells += [metrics.get("descent_fraction"), metrics.get("feasible_fraction")]
        rows.append((prefix, "clean" if gamma is None else f"gamma {gamma}", [_num(c) for c in cells]))
    return rows


def eval_header(prefix: str, step: int) -> str:
    return f"{prefix} @ step {step}".ljust(22) + "".join(c.rjust(10) for c in EVAL_COLUMNS)


def eval_row(label: str, cells: list[str]) -> str:
    return f"  {label}".ljust(22) + "".join(c.rjust(10) for c in cells)


def end_line(logs: Logs, step: int) -> str:
    runtime = logs.get("train_runtime")
    return (
        f"training done: {step} steps in {_num(runtime, '.1f')} s, mean training loss {_num(logs.get('train_loss'))}"
    )


class CompactConsole:
    """The lines for a stream of logs; remembers the step and time of the previous training log for the step time."""

    def __init__(self) -> None:
        self._last: tuple[int, float] | None = None

    def lines(self, logs: Logs, step: int, max_steps: int) -> list[str]:
        if "train_runtime" in logs:
            return [end_line(logs, step)]
        if "loss" in logs:
            now = time.perf_counter()
            per_step = None
            if self._last is not None and step > self._last[0]:
                per_step = (now - self._last[1]) / (step - self._last[0])
            self._last = (step, now)
            return [train_line(logs, step, max_steps, per_step)]
        rows = eval_rows(logs)
        if rows:
            out = []
            for prefix, label, cells in rows:
                if label == "clean":
                    out.append(eval_header(prefix, step))
                out.append(eval_row(label, cells))
            return out
        return [" | ".join(f"{k} {_num(v)}" for k, v in logs.items() if "/" not in k and k != "total_flos")]
