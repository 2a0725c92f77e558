"""
A report folder's one page. Several evaluations may write into one folder (a study's level folder holds `eval
robustness`'s results and `eval alpaca`'s head-to-head); its report.html shows every part the folder holds, whichever
evaluation wrote last, so rewriting one part never drops another.

Each evaluation defines its part as a `PagePart` (what it reads back from a folder, where it stands on the page) and
registers it in `PARTS`; a writer that changes its part calls `write_page`. The evaluations are side by side and
never import one another: the page, below them all, is where their parts meet. Every part is registered when
`constrained_sft.evaluation` is imported (its `__init__` imports each evaluation), which Python does before any of
its modules, so no part can be missing whichever module a caller imports first.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import ClassVar

from ...utils.registry import Registry
from .document import Block, Document
from .html import write_html

PAGE = "report.html"


class PagePart(ABC):
    """One evaluation's part of a report folder's page. `position`: parts are shown in increasing position; `title`:
    the page's title when this part comes first."""

    name: ClassVar[str]
    title: ClassVar[str]
    position: ClassVar[int]

    @classmethod
    @abstractmethod
    def blocks(cls, output_dir: str) -> list[Block]:
        """This part's content as the folder holds it now; [] when the folder has none of it."""


PARTS: Registry[PagePart] = Registry("report page part", PagePart, needs=("name", "title", "position"))


def write_page(output_dir: str) -> str:
    """Write `output_dir`/report.html with every registered part the folder holds (read back from its files), in
    order of position; returns its path. A folder holding none of them is a caller's bug: refused."""
    parts = [(part, part.blocks(output_dir)) for part in sorted(PARTS.values(), key=lambda p: p.position)]
    parts = [(part, blocks) for part, blocks in parts if blocks]
    if not parts:
        raise ValueError(f"{output_dir} holds no results of any evaluation ({', '.join(PARTS)}): no page to write.")
    content = [block for _, blocks in parts for block in blocks]
    return write_html(os.path.join(output_dir, PAGE), Document(parts[0][0].title, content))
