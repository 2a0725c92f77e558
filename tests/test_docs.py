"""The README is the front door (a line budget, links that resolve) and every page in docs/ is in the site's nav.
The site itself is built in strict mode by `make docs` (in `.ci/run`): a broken link inside docs/ fails there."""

import os
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
README_BUDGET = 200  # lines


def test_readme_stays_within_its_budget():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_BUDGET, f"README.md has {len(lines)} lines; move detail into docs/ (budget 200)"


def test_readme_links_resolve():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets, "README.md links into docs/"
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def _nav_pages(nav) -> set[str]:
    pages = set()
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages |= _nav_pages(value) if isinstance(value, list) else {value}
    return pages


def test_every_docs_page_is_in_the_site_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    nav = _nav_pages(config["nav"])
    assert pages - nav == set(), f"pages missing from mkdocs.yml's nav: {sorted(pages - nav)}"
    assert nav - pages == set(), f"nav entries without a page: {sorted(nav - pages)}"
    assert os.path.isfile(ROOT / "docs" / "index.md")
