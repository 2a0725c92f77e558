"""The HTML writer: one self-contained page (images embedded), verdict cells coloured."""

from __future__ import annotations

import base64
import html
import os

from ...utils.files import write_text
from .document import Block, Document, Heading, Image, Preformatted, Table, Text, cell_text

VERDICT_COLOURS = {"better": "#d7f0d7", "worse": "#f6d5d5", "same": "#eeeeee"}
STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}img{max-width:100%;margin:0.5em 0}"
    "pre{white-space:pre-wrap;word-break:break-all}td.prose{text-align:left}"
)


def _table(block: Table) -> str:
    def cell(v) -> str:
        if isinstance(v, str) and v in VERDICT_COLOURS:
            return f'<td style="background:{VERDICT_COLOURS[v]}">{v}</td>'
        css = ' class="prose"' if block.prose else ""
        return f"<td{css}>{html.escape(cell_text(v, block.number))}</td>"

    head = "".join(f"<th>{html.escape(h)}</th>" for h in block.headers)
    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in block.rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _image(block: Image) -> str:
    with open(block.path, "rb") as f:
        data = base64.b64encode(f.read()).decode()
    alt = html.escape(block.alt or os.path.basename(block.path))
    return f'<img src="data:image/png;base64,{data}" alt="{alt}">'


def render_block(block: Block) -> str:
    if isinstance(block, Heading):
        return f"<h{block.level}>{html.escape(block.text)}</h{block.level}>"
    if isinstance(block, Text):
        text = html.escape(block.text)
        return f"<p><b>{text}</b></p>" if block.strong else f"<p>{text}</p>"
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Image):
        return _image(block)
    if isinstance(block, Preformatted):
        return f"<pre>{html.escape(block.text)}</pre>"
    raise TypeError(f"Not a report block: {type(block).__name__}")


def render_html(document: Document) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(document.title)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(render_block(b) for b in document.blocks)}</body></html>"
    )


def write_html(path: str, document: Document) -> str:
    write_text(path, render_html(document))
    return path
