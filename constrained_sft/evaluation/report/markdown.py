"""The Markdown writer: images linked relative to the report's folder, tables as pipe tables."""

from __future__ import annotations

import os

from ...utils.files import write_text
from .document import Block, Document, Heading, Image, Preformatted, Table, Text, cell_text
from .sections import comparison_table


def _cell(text: str) -> str:
    """A cell's text on one line, its pipes escaped (answers hold both)."""
    return text.replace("|", "\\|").replace("\r", "").replace("\n", "<br>")


def _table(block: Table) -> str:
    lines = ["| " + " | ".join(_cell(h) for h in block.headers) + " |", "|" + "---|" * len(block.headers)]
    lines += ["| " + " | ".join(_cell(cell_text(v, block.number)) for v in row) + " |" for row in block.rows]
    return "\n".join(lines)


def render_block(block: Block, folder: str) -> str:
    if isinstance(block, Heading):
        return f"{'#' * block.level} {block.text}"
    if isinstance(block, Text):
        return f"**{block.text}**" if block.strong else block.text
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Image):
        alt = block.alt or os.path.basename(block.path)
        return f"![{alt}]({os.path.relpath(block.path, folder)})"
    if isinstance(block, Preformatted):
        return f"```\n{block.text}\n```"
    raise TypeError(f"Not a report block: {type(block).__name__}")


def render_markdown(document: Document, folder: str = ".") -> str:
    """`folder`: where the Markdown file lives (image links are relative to it)."""
    return "\n\n".join(render_block(b, folder) for b in document.blocks) + "\n"


def write_markdown(path: str, document: Document) -> str:
    write_text(path, render_markdown(document, os.path.dirname(os.path.abspath(path))))
    return path


def comparisons_markdown(comparisons: dict) -> str:
    """Every comparison's table (`sections.comparison_table`) in Markdown: what the commands print."""
    return "\n\n".join(_table(comparison_table(c)) for c in comparisons.values())
