"""
The reports' shared writers, one per format: content is built once as format-free blocks (`document`) and rendered
by the HTML writer (`html`: one self-contained page) or the Markdown writer (`markdown`); the comparisons between
arms with their intervals, which every evaluation, sweep and study shows (`sections`); a report folder's one page,
where the evaluations' parts meet (`page`), and the typed result folder each evaluation's own extends (`folder`). Each evaluation's own blocks and plots live with it.
"""

from .document import Block, Document, Heading, Image, Preformatted, Table, Text
from .html import render_html, write_html
from .markdown import comparisons_markdown, render_markdown, write_markdown
from .page import PAGE, PARTS, PagePart, write_page
from .result_folder import ResultsFolder
from .sections import comparison_blocks, comparison_table

__all__ = [
    "PAGE",
    "PARTS",
    "Block",
    "Document",
    "Heading",
    "Image",
    "PagePart",
    "ResultsFolder",
    "Preformatted",
    "Table",
    "Text",
    "comparison_blocks",
    "comparison_table",
    "comparisons_markdown",
    "render_html",
    "render_markdown",
    "write_html",
    "write_markdown",
    "write_page",
]
