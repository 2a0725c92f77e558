"""
The OpenAI-compatible endpoint an API judge calls (OpenAI's, or `OPENAI_BASE_URL`: a vLLM, TGI, llama.cpp or Ollama
server), reached once before any work, and what went wrong with it said in one line.

- `reach`: one request that costs nothing (`GET /models`) before any generation, training or judging: nothing
  answering at the URL, a refused key or an error status is a `JudgeError` naming the judge and the URL's host,
  never the key. A server without a model list (404 / 405) answered, which is all this asks.
- `one_line`: while judging, the client's own retries (twice, honouring `Retry-After` on a 429, and on 5xx and
  connection errors) come first; what still fails (the server gone, a timeout, a status it keeps returning) becomes
  a `JudgeError` in one line, where it was a traceback. Verdicts already received stay in the annotation cache.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

DEFAULT_BASE = "https://api.openai.com/v1"  # the openai client's, where OPENAI_BASE_URL is unset
REACH_TIMEOUT = 20.0  # seconds for the check before any work


class JudgeError(ValueError):
    """A judge that cannot run as configured (unknown name, missing credential or judge model, no server)."""


def base_url() -> str:
    """The URL the openai client calls: OPENAI_BASE_URL, else OpenAI's."""
    return os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE


def self_hosted_key() -> str:
    """The key for a server of one's own: OPENAI_API_KEY where set (vLLM's `--api-key`), else a placeholder (the
    openai client needs one; such servers take any)."""
    return os.environ.get("OPENAI_API_KEY") or "no-key"


def host(url: str) -> str:
    """What a report and an error name of a URL: its host and port, never a path's token or a userinfo's key."""
    return urlsplit(url).netloc.rsplit("@", 1)[-1] or url


def problem(judge: str, error: BaseException, url: str | None = None) -> str:
    """One line for an openai client error, naming the judge and the server (its host), never the key."""
    import openai

    where = host(url or base_url())
    if isinstance(error, openai.AuthenticationError):
        return f"judge {judge!r}: {where} refused the API key (401); set a valid OPENAI_API_KEY for it."
    if isinstance(error, openai.APITimeoutError):
        return f"judge {judge!r}: {where} did not answer in time (the client retried); try again, or check the server."
    if isinstance(error, openai.APIConnectionError):
        return (
            f"judge {judge!r}: nothing answered at {url or base_url()} ({type(error.__cause__ or error).__name__}); "
            "check OPENAI_BASE_URL and that the server runs."
        )
    if isinstance(error, openai.APIStatusError):
        detail = str(getattr(error, "message", "") or "")[:200]
        return f"judge {judge!r}: {where} answered {error.status_code} (after the client's retries): {detail}"
    return f"judge {judge!r}: the request to {where} failed: {type(error).__name__}: {str(error)[:200]}"


def reach(judge: str, url: str | None = None, key: str | None = None, timeout: float = REACH_TIMEOUT) -> list[str]:
    """One free request to the endpoint (`url`, else the client's) before any work (see the module docstring); the
    model ids it serves ([] where it lists none)."""
    import openai

    try:
        options: dict[str, Any] = {"timeout": timeout, "max_retries": 1}  # unset ones: the client's environment
        if url:
            options["base_url"] = url
        if key:
            options["api_key"] = key
        client = openai.OpenAI(**options)
        return [model.id for model in client.models.list()]
    except openai.APIStatusError as error:
        if error.status_code in (404, 405):
            return []  # it answered; it lists no models
        raise JudgeError(problem(judge, error, url)) from None
    except openai.OpenAIError as error:
        raise JudgeError(problem(judge, error, url)) from None


@contextlib.contextmanager
def one_line(judge: str) -> Iterator[None]:
    """An openai error inside the block becomes a `JudgeError` (see the module docstring); alpaca_eval's decoder
    logs such an error with its traceback before raising it, which is held back here."""
    import openai

    quiet = _TracebackFilter()
    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        yield
    except openai.OpenAIError as error:
        raise JudgeError(problem(judge, error)) from None
    finally:
        root.removeFilter(quiet)


class _TracebackFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and record.exc_info[0] is not None and _is_openai(record.exc_info[1]))


def _is_openai(error: BaseException | None) -> bool:
    import openai

    return isinstance(error, openai.OpenAIError)
