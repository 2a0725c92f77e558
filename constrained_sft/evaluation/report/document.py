"""
A report as format-free blocks, written once and rendered by one writer per format (`html`, `markdown`): the
robustness report, a sweep's, a study's and the AlpacaEval section are all built from these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Text:
    text: str
    strong: bool = False


@dataclass(frozen=True)
class Table:
    """Rows of cells: floats shown with `number` (a format spec), None as an empty cell, anything else as text.
    `prose`: long text cells (answers), left-aligned."""

    headers: list[str]
    rows: list[list[Any]]
    number: str = ".4f"
    prose: bool = False


@dataclass(frozen=True)
class Image:
    """A PNG file: embedded in HTML, linked (relative to the report) in Markdown."""

    path: str
    alt: str | None = None


@dataclass(frozen=True)
class Preformatted:
    text: str


Block = Heading | Text | Table | Image | Preformatted


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)


def cell_text(value: Any, number: str = ".4f") -> str:
    """A cell as both formats show it."""
    if value is None:
        return ""
    return format(value, number) if isinstance(value, float) else str(value)
