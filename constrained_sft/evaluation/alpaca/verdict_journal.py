"""
Every API verdict kept the moment it arrives, so a judging run stopped at any point (a kill -9, a closed window, a
server that went away) and run again asks only what was never answered.

alpaca_eval's annotation cache is written when an `annotate_pairs` call ends: one order of a level at a time, so a
stop inside it paid for every request of that call and kept none. `kept_completions(fn, path)` wraps an alpaca_eval
completions function (`openai_completions`, `openai_reasoning_completions`): it asks the prompts one by one, `workers`
at a time, and appends each answer to `path` (JSON lines: the key, then what the function returned for that prompt)
with a flush and an fsync, before the next is asked; prompts already there are answered from it. The key is the
SHA-256 of the prompt and the decoding arguments (model, budgets, log-probs; not the server's URL), so a changed
judge asks again and the same judge served elsewhere does not. A line
cut by the stop (or edited into another shape) is not an answer: it is asked again, and the run says how many such
lines it passed over. Requests in flight at the stop were never answered to us and are asked again. Each answer
carries its usage (`cost.usage_of`) to alpaca_eval's annotations, and each request sent is counted in a `cost.Spend`
where one is given.

Only real answers are kept: an empty completion (what alpaca_eval's decoder returns once it gives up, or a server's
empty message) is used for this run, where it counts as unparsed, but never kept, so a rerun asks again; each text
is kept to its first `MAX_TEXT` characters (a verdict is a few words; the parsers read the first label). Every
request goes through the judge's `endpoint.JudgeEndpoint` (its client options, given to the completions function),
and an answer the completions function cannot read is a `JudgeError` naming the server.

Written by hand because alpaca_eval keeps its cache per call and the openai client keeps none.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .cost import Spend, usage_of
from .endpoint import JudgeEndpoint
from .errors import JudgeError

WORKERS = 8  # requests at a time (alpaca_eval's own default concurrency for the OpenAI decoders is 5-8)
MAX_TEXT = 16_384  # characters of any text kept of one answer (a reasoning model's 4,096-token budget, visible part)
KEY_LENGTH = 64  # a SHA-256 in hex


def prompt_key(prompt: str, kwargs: dict) -> str:
    decoding = {
        k: v for k, v in kwargs.items() if isinstance(v, (str, int, float, bool, type(None))) and k != "base_url"
    }
    return hashlib.sha256(json.dumps([prompt, decoding], sort_keys=True).encode()).hexdigest()


def is_answer(row: object) -> bool:
    """A kept line as `kept_completions` writes it: a key, and an answer whose completion is a non-empty text."""
    if not isinstance(row, dict) or not isinstance(row.get("key"), str) or len(row["key"]) != KEY_LENGTH:
        return False
    answer = row.get("answer")
    return (
        isinstance(answer, dict) and isinstance(answer.get("completions"), str) and bool(answer["completions"].strip())
    )


def read_kept(path: str | None) -> tuple[dict[str, dict], int]:
    """({key: one prompt's answer} from `path`, how many of its lines are no answer: cut by a stop, edited, or an
    empty answer an earlier version kept). A `path` that is not a plain file (a folder in its place) is refused;
    None: nothing kept (a judge without a folder)."""
    kept: dict[str, dict] = {}
    skipped = 0
    if path is None or not os.path.lexists(path):
        return kept, skipped
    if os.path.islink(path) or not os.path.isfile(path):
        raise JudgeError(
            f"{path} is not a plain file: it is where the judge's verdicts are kept as they arrive; move it away."
        )
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if is_answer(row):
                kept[row["key"]] = row["answer"]
            elif line.strip():
                skipped += 1
    return kept, skipped


def capped(value: Any) -> Any:
    """`value` with every text in it cut to `MAX_TEXT` characters (what is kept of an answer)."""
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, dict):
        return {k: capped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [capped(v) for v in value]
    return value


def kept_completions(
    fn: Callable[..., dict],
    path: str | None,
    endpoint: JudgeEndpoint,
    workers: int = WORKERS,
    spend: Spend | None = None,
) -> Callable[..., dict]:
    """`fn` asking each prompt once ever, through `endpoint` (see the module docstring; `path` None: nothing kept
    beyond the call); the same return shape as `fn`'s."""
    lock = threading.Lock()
    read_kept(path)  # a folder in the file's place: refused when the judge is built, before any work

    def completions(prompts: Sequence[str], **kwargs) -> dict[str, list]:
        kept, skipped = read_kept(path)
        if skipped:
            print(
                f"{path}: {skipped} line(s) hold no answer (cut by a stop, edited, or empty); their prompts are asked again."
            )
        keys = [prompt_key(p, kwargs) for p in prompts]
        first = {key: i for i, key in reversed(list(enumerate(keys)))}  # a repeated prompt is asked once
        todo = [first[key] for key in dict.fromkeys(keys) if key not in kept]
        fresh: dict[str, dict] = {}  # this call's answers, empty ones included (used, not kept)

        failed = threading.Event()  # once a request failed for good, nothing more is sent (in flight: finishes)

        def ask(i: int) -> None:
            if failed.is_set():
                return
            try:
                returned = fn([prompts[i]], **kwargs, client_kwargs=endpoint.client_options())
                answer = capped({name: values[0] for name, values in returned.items()})
            except JudgeError:
                failed.set()
                raise
            except (AttributeError, KeyError, TypeError, IndexError) as error:  # the decoder read an odd answer
                failed.set()
                raise JudgeError(
                    f"{endpoint.label}: the answer from {endpoint.where} could not be read "
                    f"({type(error).__name__}: {str(error)[:120]}); check the server."
                ) from None
            except BaseException:
                failed.set()
                raise
            answer.update(usage_of(answer))
            with lock:
                fresh[keys[i]] = answer
            if spend is not None:
                spend.add()
            if path is None or not is_answer({"key": keys[i], "answer": answer}):
                return  # an empty answer: used by this run, asked again by the next
            line = json.dumps({"key": keys[i], "answer": answer}, default=str) + "\n"
            with lock:
                with open(path, "a", encoding="utf-8") as f:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
                kept[keys[i]] = answer

        if todo and path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        if todo:
            with ThreadPoolExecutor(max_workers=max(1, min(workers, len(todo)))) as pool:
                list(pool.map(ask, todo))  # the first error stops the run; what arrived before it is kept
        found = {**fresh, **kept}
        answers = [{**found[key], **usage_of(found[key])} for key in keys]  # usage: also of answers kept before
        return {name: [a.get(name) for a in answers] for name in answers[0]} if answers else {}

    return completions
