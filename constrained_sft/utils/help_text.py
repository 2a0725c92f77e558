"""Help text as argparse formats it."""

from __future__ import annotations

import re


def percent(text: str) -> str:
    """`text` with every lone '%' doubled, for argparse's help formatting."""
    return re.sub(r"%%|%\((?=\w+\)s)|%", lambda m: m.group(0) if m.group(0) != "%" else "%%", text)
