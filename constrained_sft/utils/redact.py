"""
One redaction for every URL the library records, prints or compares: a URL may carry a secret (a judge server's
`http://user:sk-...@host/v1`, a `?api_key=...` query, a database password in a sweep's storage URL), and what a run
writes (markers, study.json, reports) or prints (refusals, logs) must name the server without it.

- `redact_url`: the password of a `user:password@` userinfo replaced by `***` (the user name kept, as SQLAlchemy's
  `hide_password` renders a storage URL); a userinfo without a password (`sk-...@host`: the key as the user name)
  replaced whole; the value of every query parameter whose name says it is a credential (`CREDENTIAL`) replaced. The
  scheme, host, port, path and the other parameters are kept, so the same server reads the same with any secret.
- `redact_text`: every URL inside a text (an error message, a log line) redacted.

Comparing two settings through their redacted URLs is what lets a run continue after a key was rotated, and what
keeps the key out of the comparison's message.

Written by hand: `urllib.parse` splits a URL but has no notion of its secrets, and SQLAlchemy's `make_url` hides a
password only (not a key as a user name, nor a query's token) and knows database URLs alone.
"""

from __future__ import annotations

import re
from typing import overload
from urllib.parse import parse_qsl, urlencode, urlsplit

MASK = "***"
# query parameter names that carry a credential (api_key, access_token, X-Amz-Signature, sig, password, ...)
CREDENTIAL = re.compile(r"key|token|secret|passw|pwd|auth|sig|credential|session|cookie", re.IGNORECASE)
# a URL inside a text: up to a space or a quote, a trailing punctuation mark (the sentence's) left out
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]*[^\s'\"<>`.,;:!?)\]]")


@overload
def redact_url(url: str) -> str: ...
@overload
def redact_url(url: None) -> None: ...
def redact_url(url: str | None) -> str | None:
    """`url` without its secrets (see the module docstring); a text that is no URL is returned as it is."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:  # unparsable (an unclosed IPv6 bracket): only its scheme is sure to hold no secret
        return url.split("://", 1)[0] + "://" + MASK if "://" in url else MASK
    out = url
    if "@" in parts.netloc:
        userinfo, host = parts.netloc.rsplit("@", 1)
        user, has_password, _ = userinfo.partition(":")
        out = out.replace(parts.netloc, f"{user}:{MASK}@{host}" if has_password and user else f"{MASK}@{host}", 1)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if any(CREDENTIAL.search(name) for name, _ in pairs):  # the query rebuilt; every other part kept as written
        query = urlencode([(n, MASK if CREDENTIAL.search(n) else v) for n, v in pairs], safe="*")
        out = out.replace("?" + parts.query, "?" + query, 1)
    return out


def redact_text(text: str) -> str:
    """`text` with every URL in it redacted (`redact_url`)."""
    return URL.sub(lambda m: redact_url(m.group(0)), text) if "://" in text else text
