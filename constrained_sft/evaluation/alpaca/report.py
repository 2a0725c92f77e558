"""The AlpacaEval part of a report folder: alpaca_eval.json, the win-rate plot, and report.html again with its section
(`report.headtohead`) after the robustness results the folder holds."""

from __future__ import annotations

import os

from ...utils.files import write_json
from ..report import Document, write_html, write_report
from ..report.headtohead import ALPACA_PLOT, alpaca_blocks, folder_sections, plot_win_rates
from ..results import ALPACA_JSON, HeadToHead, RobustnessResults


def write_alpaca(head: HeadToHead, output_dir: str) -> dict[str, str]:
    """alpaca_eval.json and its plot, then report.html again (with the robustness results if the folder has them)."""
    os.makedirs(output_dir, exist_ok=True)
    paths = {"json": os.path.join(output_dir, ALPACA_JSON), "plot": os.path.join(output_dir, ALPACA_PLOT)}
    write_json(paths["json"], {**head.to_dict(), "files": paths})
    plot_win_rates(head, paths["plot"])
    results = RobustnessResults.load(output_dir)
    if results is not None:
        paths["html"] = write_report(results, output_dir, more_sections=folder_sections(output_dir))["html"]
    else:
        page = Document("Head-to-head", alpaca_blocks(head, output_dir))
        paths["html"] = write_html(os.path.join(output_dir, "report.html"), page)
    return paths
