"""
A protocol-faithful OpenAI chat-completions server on 127.0.0.1 for the judge tests: the real `openai` client and
alpaca_eval's own decoder send it real HTTP requests (`OPENAI_BASE_URL`), and it answers as the API does, in the
shapes the client parses: `choices[].message`, `usage`, `logprobs.content[].top_logprobs` when `logprobs` is asked
(alpaca_eval's weighted GPT-4 annotator), OpenAI's error body and status codes, `Retry-After` on a 429, a 401
without a bearer key.

Its verdict is a rule, so tests know the answer: of the two outputs in the judging prompt (our pairwise prompt's
"## Output (a)" / "## Output (b)", or alpaca_eval's "m" / "M" model identifiers), the one holding more words wins
(the first on a tie). `faults` holds what the next requests get instead of an answer ("429", "500", "slow" (sleeps
past the client's timeout), "drop" (the connection closed without an answer, as a crashed server's), "unparsable" (a
verdict no parser reads), "empty" (an empty message), "ok" (an answer)), or a misbehaving server's answers: "html" (an
HTML page with status 200, as a proxy's login page), "shape" (JSON of another shape), "no-choices" (`"choices": []`),
"string-message" (a `message` that is a string), "huge" (a 2 MiB verdict), "negative-usage" (a `usage` of -10**9
tokens), "drip" (a whole answer sent one byte every `drip_seconds`). `models_fault` likewise for the model list: "html",
"shape", "slow", "404". `forever`: a fault every request gets, the queue aside. `requests` counts
what it saw, bodies, when each arrived and the key's last four characters (to check that one was sent, never to keep it); `usage` the
`usage` of every answer it sent (a server made with `report_usage=False` sends none, as some proxies do).

Written here by hand because what is tested is the HTTP path itself: a mock of `openai` would skip the client's
requests, retries and timeouts this server exercises.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAIRWISE = re.compile(r"## Output \(a\)\n(.*?)\n\n## Output \(b\)\n(.*?)\n\n## Verdict", re.S)
CLF = re.compile(r'"model_identifier": "m",\s*"output": """(.*?)"""\s*},\s*{\s*"model_identifier": "M",\s*'
                 r'"output": """(.*?)"""', re.S)  # fmt: skip


def verdict(prompt: str) -> tuple[str, bool] | None:
    """(the winner's label, whether the prompt is alpaca_eval's m / M one) by the rule: more words wins."""
    for pattern, labels, clf in ((PAIRWISE, ("Output (a)", "Output (b)"), False), (CLF, ("m", "M"), True)):
        found = pattern.search(prompt)
        if found:
            first, second = (len(x.split()) for x in found.groups())
            return labels[0] if first >= second else labels[1], clf
    return None


class OpenAIServer:
    """`with OpenAIServer() as server:` serves at `server.url` (give it as OPENAI_BASE_URL) until the block ends."""

    def __init__(self, slow_seconds: float = 3.0, keys: tuple[str, ...] | None = None, report_usage: bool = True):
        self.requests: list[dict] = []
        self.usage: list[dict] = []
        self.report_usage = report_usage
        self.keys = keys  # the keys it accepts (401 for any other); None: any key
        self.faults: deque[str] = deque()
        self.forever: str | None = None
        self.models_fault: str | None = None
        self.drip_seconds = 0.25
        self.slow_seconds = slow_seconds
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: the tests read `requests`
                pass

            def do_GET(self):  # the model list: what a client asks before any work
                key = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                with server.lock:
                    server.requests.append(
                        {"path": self.path, "body": None, "key_end": key[-4:], "at": time.monotonic()}
                    )
                if not key or (server.keys is not None and key not in server.keys):
                    return self.error(401, "invalid_api_key", "Incorrect API key provided.")
                if not self.path.split("?")[0].rstrip("/").endswith("/v1/models") or server.models_fault == "404":
                    return self.error(404, "not_found", f"Unknown path {self.path}")
                if server.models_fault == "html":
                    return self.send_raw(200, b"<!DOCTYPE html><html><body>Sign in</body></html>", "text/html")
                if server.models_fault == "shape":
                    return self.send(200, {"models": ["gpt-5"]})
                if server.models_fault == "slow":
                    time.sleep(server.slow_seconds)
                self.send(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "test"}
                                                           for m in ("gpt-5", "gpt-4-1106-preview")]})  # fmt: skip

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                key = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                with server.lock:
                    server.requests.append(
                        {"path": self.path, "body": body, "key_end": key[-4:], "at": time.monotonic()}
                    )
                    fault = server.faults.popleft() if server.faults else server.forever
                if not key or (server.keys is not None and key not in server.keys):
                    return self.error(401, "invalid_api_key", "Incorrect API key provided.")
                if not self.path.split("?")[0].rstrip("/").endswith("/v1/chat/completions"):
                    return self.error(404, "not_found", f"Unknown path {self.path}")
                if fault == "html":
                    return self.send_raw(200, b"<!DOCTYPE html><html><body>Sign in</body></html>", "text/html")
                if fault == "shape":
                    return self.send(200, {"result": "Output (a)"})
                if fault == "no-choices":
                    return self.send(200, {"id": "x", "object": "chat.completion", "choices": []})
                if fault == "string-message":
                    return self.send(200, {"id": "x", "object": "chat.completion",
                                           "choices": [{"index": 0, "message": "Output (a)"}]})  # fmt: skip
                if fault == "429":
                    return self.error(
                        429, "rate_limit_exceeded", "Rate limit reached for requests", {"Retry-After": "0"}
                    )
                if fault == "500":
                    return self.error(500, "server_error", "The server had an error while processing your request.")
                if fault == "slow":
                    time.sleep(server.slow_seconds)
                if fault == "drop":
                    self.close_connection = True
                    return
                self.answer(body, fault)

            def error(self, status: int, code: str, message: str, headers: dict | None = None):
                payload = {"error": {"message": message, "type": code, "param": None, "code": code}}
                self.send(status, payload, headers)

            def answer(self, body: dict, fault: str | None):
                prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
                found = verdict(prompt)
                text = found[0] if found else "I cannot tell."
                if fault == "huge":
                    text = text + " " + "x" * (2 << 20)
                elif fault == "unparsable":
                    text = "Both outputs have merit."
                elif fault == "empty":
                    text = ""
                choice = {"index": 0, "finish_reason": "stop", "logprobs": None,
                          "message": {"role": "assistant", "content": text}}  # fmt: skip
                if body.get("logprobs") and found and fault in (None, "ok"):
                    winner, loser = text, ("M" if text == "m" else "m")
                    top = [{"token": winner, "logprob": math.log(0.9), "bytes": list(winner.encode())},
                           {"token": loser, "logprob": math.log(0.1), "bytes": list(loser.encode())}]  # fmt: skip
                    choice["logprobs"] = {"content": [{**top[0], "top_logprobs": top[: body.get("top_logprobs", 2)]}]}
                prompt_tokens = max(1, len(prompt) // 4)
                completion_tokens = max(1, len(text.split()))
                usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                         "total_tokens": prompt_tokens + completion_tokens}  # fmt: skip
                payload = {"id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion",
                           "created": int(time.time()), "model": body.get("model", ""), "choices": [choice]}  # fmt: skip
                if fault == "negative-usage":
                    usage = {"prompt_tokens": -(10**9), "completion_tokens": 1, "total_tokens": 1 - 10**9}
                if server.report_usage:
                    payload["usage"] = usage
                    with server.lock:
                        server.usage.append(usage)
                if fault == "drip":
                    return self.send_raw(200, json.dumps(payload).encode(), "application/json", drip=True)
                self.send(200, payload)

            def send(self, status: int, payload: dict, headers: dict | None = None):
                self.send_raw(status, json.dumps(payload).encode(), "application/json", headers)

            def send_raw(self, status: int, data: bytes, kind: str, headers: dict | None = None, drip: bool = False):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    if not drip:
                        return self.wfile.write(data)
                    self.wfile.flush()
                    for i in range(len(data)):  # one byte at a time: each read answers, the whole never comes in time
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                        time.sleep(server.drip_seconds)
                except (BrokenPipeError, ConnectionResetError):  # a client that timed out and left
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> OpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
