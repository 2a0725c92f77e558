"""
The OpenAI-compatible server an API judge calls, as one object (`JudgeEndpoint`) that owns its URL, model, timeout
and key: every client a judge builds (ours, alpaca_eval's decoder) takes its settings from `client_options`, every
error names its server, and nothing it records or prints carries the URL's secrets (`utils.redact`).

- `reach`: one request that costs nothing (`GET /models`) before any generation, training or judging, within
  `--judge_timeout` (else `REACH_TIMEOUT`): nothing answering, a refused key, an error status, an answer that is no
  model list (a URL without `/v1` gets a 404: said, with the fix) or a model the server does not serve is a
  `JudgeError` naming the judge and the server, never the key.
- `one_line`: while judging, the client's own retries (twice, honouring `Retry-After` on a 429, and on 5xx, timeouts
  and connection errors) come first; what still fails becomes a `JudgeError` in one line, where it was a traceback.
  Verdicts already received are kept (`verdict_journal`). Log lines meanwhile carry no URL's secret and no client traceback.
- Each request's answer is checked on arrival (`transport`: a deadline end to end, a size cap, the shape, a rate
  limit that outlasts the retries).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from ...utils.redact import redact_text, redact_url
from ...utils.types import Kwargs
from .errors import JudgeError
from .transport import make_transport

DEFAULT_BASE = "https://api.openai.com/v1"  # the openai client's, where OPENAI_BASE_URL is unset
REACH_TIMEOUT = 20.0  # seconds for the check before any work, where --judge_timeout is unset
CLIENT_TIMEOUT = 600.0  # seconds per request where --judge_timeout is unset (the openai client's default)
MAX_RETRIES = 2  # the openai client's default, set explicitly: the transport must know which try is the last


def base_url() -> str:
    """The URL the openai client calls: OPENAI_BASE_URL, else OpenAI's."""
    return os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE


def self_hosted_key() -> str:
    """The key for a server of one's own: OPENAI_API_KEY where set (vLLM's `--api-key`), else a placeholder (the
    openai client needs one; such servers take any)."""
    return os.environ.get("OPENAI_API_KEY") or "no-key"


def host(url: str) -> str:
    """What a report and an error name of a URL: its host and port, never a path's token or a userinfo's key."""
    return urlsplit(url).netloc.rsplit("@", 1)[-1] or redact_url(url)


@dataclass
class JudgeEndpoint:
    """An API judge's server. `url`: the API root the user gave (it may carry a key: it is used to connect and shown
    only redacted); None: the openai client's own (OPENAI_BASE_URL, else OpenAI's), as alpaca_eval's decoder and the
    gpt5 judge reach it. `key`: None for the client's OPENAI_API_KEY. `timeout`: seconds one request may take, end
    to end (None: the client's 600)."""

    judge: str
    model: str | None
    url: str | None = None
    timeout: float | None = None
    key: str | None = None
    _http: Any = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def shown(self) -> str:
        """The server's URL as messages and records give it: its secrets replaced."""
        return redact_url(self.url or base_url())

    @property
    def where(self) -> str:
        """The server's host and port, for short messages."""
        return host(self.url or base_url())

    @property
    def label(self) -> str:
        """How messages name the judge: its `--judge` name and the model it asks for."""
        return f"judge {self.judge!r}" + (f" ({self.model})" if self.model else "")

    def http_client(self, timeout: float, max_retries: int) -> Any:
        """An HTTP client whose transport checks every answer (`transport`); the judging one (`self.timeout`) made
        once and shared by every request (thread-safe, connections reused), the reach's made for it."""
        import openai

        def make() -> Any:
            return openai.DefaultHttpxClient(transport=make_transport(self.label, self.where, timeout, max_retries))

        if (timeout, max_retries) != (self.timeout or CLIENT_TIMEOUT, MAX_RETRIES):
            return make()
        with self._lock:
            self._http = self._http or make()
            return self._http

    def client_options(self, timeout: float | None = None, max_retries: int = MAX_RETRIES) -> Kwargs:
        """The keyword arguments of `openai.OpenAI` for this server: its timeout and retries, the checked HTTP
        client and, for a URL of the user's, the root (its query, e.g. `?api_key=`, sent as the client's default
        query, where the client would lose it) and key."""
        seconds = timeout or self.timeout or CLIENT_TIMEOUT
        options: Kwargs = {
            "timeout": seconds,
            "max_retries": max_retries,
            "http_client": self.http_client(seconds, max_retries),
        }
        if self.url:
            parts = urlsplit(self.url)
            options["base_url"] = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
            if parts.query:
                options["default_query"] = dict(parse_qsl(parts.query, keep_blank_values=True))
        if self.key is not None:
            options["api_key"] = self.key
        return options

    def reach(self, model_flag: bool = False) -> list[str]:
        """One free request before any work (see the module docstring); the model ids the server lists. A model the
        server does not list is refused (`model_flag`: whether the user named it with `--judge_model`)."""
        import openai

        with quiet_and_redacted():
            try:
                client = openai.OpenAI(**self.client_options(timeout=self.timeout or REACH_TIMEOUT, max_retries=1))
                served = [model.id for model in client.models.list()]
            except openai.APIStatusError as error:
                if error.status_code in (404, 405):
                    raise JudgeError(
                        f"{self.label}: {self.shown} answered {error.status_code} to GET /models, so it is no OpenAI "
                        "API root; give the URL its API answers at, which ends in /v1 for vLLM, llama.cpp's server, "
                        "Ollama and TGI (e.g. http://localhost:8000/v1)."
                    ) from None
                raise JudgeError(self.problem(error)) from None
            except openai.OpenAIError as error:
                raise JudgeError(self.problem(error)) from None
        if self.model and served and self.model not in served:
            fix = "; give `--judge_model` one of them" if model_flag else ""
            raise JudgeError(
                f"{self.label} asks for model {self.model!r}, which {self.where} does not serve (it serves "
                f"{', '.join(served[:10])}{', ...' if len(served) > 10 else ''}){fix}."
            )
        return served

    def problem(self, error: BaseException) -> str:
        """One line for an openai client error, naming the judge and its server, never the key."""
        import openai

        cause = error.__cause__
        if isinstance(cause, JudgeError):
            return str(cause)
        if isinstance(error, openai.AuthenticationError):
            return f"{self.label}: {self.where} refused the API key (401); set a valid OPENAI_API_KEY for it."
        if isinstance(error, openai.APITimeoutError):
            return (
                f"{self.label}: {self.where} did not answer in time (the client retried); try again, raise "
                "--judge_timeout, or check the server."
            )
        if isinstance(error, openai.APIConnectionError):
            return (
                f"{self.label}: nothing answered at {self.shown} ({type(cause or error).__name__}); check the URL "
                "and that the server runs."
            )
        if isinstance(error, openai.RateLimitError):
            return (
                f"{self.label}: {self.where} answered 429 (rate limited) and the client gave up; the verdicts received "
                "so far are kept: wait, then run the same command again (it asks only what was never answered)."
            )
        if isinstance(error, openai.APIStatusError):
            detail = redact_text(str(getattr(error, "message", "") or ""))[:200]
            return f"{self.label}: {self.where} answered {error.status_code} (after the client's retries): {detail}"
        return f"{self.label}: the request to {self.where} failed: {type(error).__name__}: {redact_text(str(error))[:200]}"

    @contextlib.contextmanager
    def one_line(self) -> Iterator[None]:
        """An openai error inside the block becomes a `JudgeError` (see the module docstring)."""
        import openai

        with quiet_and_redacted():
            try:
                yield
            except openai.OpenAIError as error:
                raise JudgeError(self.problem(error)) from None


@contextlib.contextmanager
def quiet_and_redacted() -> Iterator[None]:
    """While a judge talks to its server: the HTTP libraries' request lines (which print the URL, its key included)
    held back, every log line's URLs redacted, and the tracebacks alpaca_eval's decoder logs before raising an openai
    error dropped (the error is said in one line)."""
    loggers = [logging.getLogger(name) for name in ("httpx", "httpx2", "httpcore", "openai")]
    levels = [lg.level for lg in loggers]
    guard = _LogGuard()
    handlers = list(logging.getLogger().handlers)
    if not handlers and logging.lastResort is not None:  # no handler: Python's last resort prints warnings
        handlers = [logging.lastResort]
    for lg in loggers:
        lg.setLevel(max(lg.getEffectiveLevel(), logging.WARNING))
    for handler in handlers:
        handler.addFilter(guard)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        for handler in handlers:
            handler.removeFilter(guard)


class _LogGuard(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and _is_client_error(record.exc_info[1]):
            return False
        message = record.getMessage()
        if "://" in message:
            record.msg, record.args = redact_text(message), None
        return True


def _is_client_error(error: BaseException | None) -> bool:
    import openai

    return isinstance(error, (openai.OpenAIError, JudgeError))
