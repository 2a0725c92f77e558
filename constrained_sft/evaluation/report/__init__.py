"""
Reports, one writer per format: content is built once as format-free blocks (`document`) and rendered by the HTML
writer (`html`: one self-contained page) or the Markdown writer (`markdown`). The robustness report (`robustness`:
results.json, results.csv, the plots of `plots`, report.html), the comparisons and models' summary that sweeps and
studies show too (`sections`), `eval exits`' blocks and plots (`exits`), a noisy lm-eval run's (`harness`) and a
head-to-head judging's table, plot and section (`headtohead`) are all blocks, built from the typed results.
"""

from .document import Block, Document, Heading, Image, Preformatted, Table, Text
from .html import render_html, write_html
from .markdown import comparisons_markdown, render_markdown, write_markdown
from .robustness import robustness_blocks, write_csv, write_report
from .sections import comparison_blocks, comparison_table, summary_table

__all__ = [
    "Block",
    "Document",
    "Heading",
    "Image",
    "Preformatted",
    "Table",
    "Text",
    "comparison_blocks",
    "comparison_table",
    "comparisons_markdown",
    "render_html",
    "render_markdown",
    "robustness_blocks",
    "summary_table",
    "write_csv",
    "write_html",
    "write_markdown",
    "write_report",
]
