"""
Every HTTP answer an API judge gets, held to rules before the openai client (ours, or alpaca_eval's decoder) reads it:
the client's HTTP transport is wrapped (`CheckedTransport`, handed to each client by `endpoint.JudgeEndpoint`), so one
place sees every answer of every decoder.

- **A deadline per request, end to end.** httpx's timeouts hold per read, so a server that drips a byte every two
  seconds never trips a five-second timeout. The body is read here chunk by chunk, and once `timeout` seconds have
  passed since the request was sent it fails as a read timeout, which the client retries and then reports (one
  request ends within about twice the timeout: the wait for the headers is httpx's own).
- **A cap on the body** (`MAX_BODY`): a verdict is a few hundred bytes and a model list some kilobytes; a body past
  the cap is refused, not kept.
- **The shape of a 200 answer** to `GET …/models` (an object whose `data` lists objects with a string `id`) and to
  `POST …/chat/completions` (a non-empty `choices` list whose first `message` is an object with a string or null
  `content`; `usage`, where sent, an object): anything else (an HTML page, other JSON) is a `JudgeError` naming the
  server and what it sent.
- **Rate limited to the end**: a 429 on the client's last retry (`x-stainless-retry-count`) is a `JudgeError`
  raised through alpaca_eval's decoder, which would otherwise retry ten more times and return empty completions.

Errors raised here are `JudgeError`s (not the client's), so neither the openai client nor alpaca_eval's decoder
retries or swallows them. Written by hand: httpx has no deadline for a whole request and the openai client
checks no answer's shape (it builds its response objects without validation).
"""

from __future__ import annotations

import json
import time
from typing import Any

from .errors import JudgeError

MAX_BODY = {"models": 32 << 20, "chat": 1 << 20}  # bytes: a model list (OpenRouter's is a few MiB), an answer
MAX_SHOWN = 80  # characters of an unexpected body quoted in the error


def http_module() -> Any:
    """The HTTP library the installed openai client uses: httpx2 (openai 3) where it is installed, else httpx."""
    try:
        import httpx2

        return httpx2
    except ImportError:  # openai 1.x / 2.x
        import httpx

        return httpx


def kind_of(path: str) -> str | None:
    """Which answer a request path asks for: "models", "chat", or None (another endpoint: passed on unchecked)."""
    path = path.rstrip("/")
    return "models" if path.endswith("/models") else "chat" if path.endswith("/chat/completions") else None


def sent(body: bytes) -> str:
    """What a server sent, in a few words, for an error message."""
    text = body.decode("utf-8", "replace").strip()
    if text[:200].lower().lstrip().startswith(("<!doctype", "<html", "<?xml")):
        return "an HTML page"
    return f"{text[:MAX_SHOWN]!r}{'...' if len(text) > MAX_SHOWN else ''}" if text else "an empty body"


def shape_problem(kind: str, value: object) -> str | None:
    """Why `value` (a parsed 200 body) is not an OpenAI model list / chat completion; None where it is one."""
    if not isinstance(value, dict):
        return f"a JSON {type(value).__name__}, not an object"
    if kind == "models":
        data = value.get("data")
        if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
            return "an object without a `data` list of models with string ids"
        return None
    choices = value.get("choices")
    if not isinstance(choices, list) or not choices:
        return "no `choices`" if not choices else "`choices` that is not a list"
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        return f"a choice whose `message` is {type(message).__name__}, not an object"
    if not isinstance(message.get("content"), (str, type(None))):
        return f"a message whose `content` is {type(message['content']).__name__}, not a string"
    if value.get("usage") is not None and not isinstance(value["usage"], dict):
        return f"a `usage` that is {type(value['usage']).__name__}, not an object"
    return None


def make_transport(label: str, where: str, timeout: float, max_retries: int) -> Any:
    """A `CheckedTransport` of the installed HTTP library (see the module docstring) for the judge `label` (as
    errors name it) at `where` (its server as shown)."""
    http = http_module()

    class CheckedTransport(http.BaseTransport):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            self.inner = http.HTTPTransport()

        def handle_request(self, request: Any) -> Any:
            start = time.monotonic()
            response = self.inner.handle_request(request)
            kind = kind_of(request.url.path)
            cap = MAX_BODY.get(kind or "models", MAX_BODY["models"])
            chunks, size = [], 0
            try:
                for chunk in response.stream:
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > cap:
                        raise JudgeError(
                            f"{label}: {where} sent an answer of over {cap >> 20} MiB to {request.method} "
                            f"{request.url.path} (a verdict is a few hundred bytes); check the server."
                        )
                    if time.monotonic() - start > timeout:
                        raise http.ReadTimeout(f"no whole answer within {timeout:g} s", request=request)
            finally:
                response.close()
            body = b"".join(chunks)
            if response.status_code == 429 and int(request.headers.get("x-stainless-retry-count", 0)) >= max_retries:
                raise JudgeError(
                    f"{label}: {where} kept answering 429 (rate limited) through the client's {max_retries} retries; "
                    "the verdicts received so far are kept: wait, then run the same command again (it asks only "
                    "what was never answered)."
                )
            out = http.Response(
                response.status_code,
                headers=response.headers,
                stream=http.ByteStream(body),
                extensions=response.extensions,
                request=request,
            )
            if response.status_code == 200 and kind is not None:
                check_shape(kind, http.Response(200, headers=response.headers, content=body), request)
            return out

        def close(self) -> None:
            self.inner.close()

    def check_shape(kind: str, probe: Any, request: Any) -> None:
        probe.read()  # decoded as the client would (gzip, ...)
        try:
            problem = shape_problem(kind, json.loads(probe.content))
        except ValueError:
            problem = sent(probe.content)
        if problem is not None:
            what = "an OpenAI model list" if kind == "models" else "an OpenAI chat completion"
            raise JudgeError(
                f"{label}: {where} answered {request.method} {request.url.path} with {problem} where {what} "
                "belongs; is the URL the server's OpenAI API root (e.g. http://localhost:8000/v1)?"
            )

    return CheckedTransport()
