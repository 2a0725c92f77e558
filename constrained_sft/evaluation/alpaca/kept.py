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
cut by the stop is ignored. Requests in flight at the stop were never answered to us and are asked again. Each answer
carries its usage (`cost.usage_of`) to alpaca_eval's annotations, and each request sent is counted in a `cost.Spend`
where one is given.

Written by hand because alpaca_eval keeps its cache per call and the openai client keeps none.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from .cost import Spend, usage_of

WORKERS = 8  # requests at a time (alpaca_eval's own default concurrency for the OpenAI decoders is 5-8)


def prompt_key(prompt: str, kwargs: dict) -> str:
    decoding = {
        k: v for k, v in kwargs.items() if isinstance(v, (str, int, float, bool, type(None))) and k != "base_url"
    }
    return hashlib.sha256(json.dumps([prompt, decoding], sort_keys=True).encode()).hexdigest()


def read_kept(path: str) -> dict[str, dict]:
    """{key: one prompt's answer} from `path`; a line cut by a stop (or otherwise unreadable) is skipped."""
    kept: dict[str, dict] = {}
    if not os.path.isfile(path):
        return kept
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
                kept[row["key"]] = row["answer"]
            except (ValueError, KeyError, TypeError):
                continue
    return kept


def kept_completions(
    fn: Callable[..., dict], path: str, workers: int = WORKERS, spend: Spend | None = None
) -> Callable[..., dict]:
    """`fn` asking each prompt once ever (see the module docstring); the same return shape as `fn`'s."""
    lock = threading.Lock()

    def completions(prompts: Sequence[str], **kwargs) -> dict[str, list]:
        kept = read_kept(path)
        keys = [prompt_key(p, kwargs) for p in prompts]
        first = {key: i for i, key in reversed(list(enumerate(keys)))}  # a repeated prompt is asked once
        todo = [first[key] for key in dict.fromkeys(keys) if key not in kept]

        failed = threading.Event()  # once a request failed for good, nothing more is sent (in flight: finishes)

        def ask(i: int) -> None:
            if failed.is_set():
                return
            try:
                answer = {name: values[0] for name, values in fn([prompts[i]], **kwargs).items()}
            except BaseException:
                failed.set()
                raise
            answer.update(usage_of(answer))
            line = json.dumps({"key": keys[i], "answer": answer}, default=str) + "\n"
            with lock:
                with open(path, "a", encoding="utf-8") as f:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
                kept[keys[i]] = answer
            if spend is not None:
                spend.add()

        if todo:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with ThreadPoolExecutor(max_workers=max(1, min(workers, len(todo)))) as pool:
                list(pool.map(ask, todo))  # the first error stops the run; what arrived before it is kept
        answers = [{**kept[key], **usage_of(kept[key])} for key in keys]  # usage: also of answers kept before it was
        return {name: [a.get(name) for a in answers] for name in answers[0]} if answers else {}

    return completions
