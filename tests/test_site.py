"""
The documentation site, built as `make docs` builds it, is self-contained and renders: the home page and a guide
load only files of the site (no CDN: stylesheets, scripts, images and fonts resolve inside it), and headless
Chromium with the network off draws them (the theme's header and the page's text, not a blank or unstyled page).
`.ci/run` installs Chromium and sets CONSTRAINED_SFT_REQUIRE_CHROMIUM=1, so CI runs the rendering test, never skips it.
"""

import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import hang_limit

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["index.html", "guides/performance/index.html"]
HEADER_RGB = (63, 81, 181)  # Material's default primary colour (indigo), the header bar


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, str(ROOT / "docs" / "generate_reference.py")], check=True, capture_output=True)
    mkdocs = Path(sys.executable).parent / "mkdocs"
    build = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    return out


class _Assets(HTMLParser):
    """The URLs a page loads by itself: images, scripts, stylesheets and icons (not the links a reader follows)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("img", "script") and attrs.get("src"):
            self.urls.append(attrs["src"])
        if (
            tag == "link"
            and attrs.get("href")
            and set((attrs.get("rel") or "").split()) & {"stylesheet", "icon", "preload"}
        ):
            self.urls.append(attrs["href"])


@pytest.mark.parametrize("page", PAGES)
def test_pages_load_only_files_of_the_site(site, page):
    parser = _Assets()
    parser.feed((site / page).read_text())
    assert parser.urls, page
    for url in parser.urls:
        assert "://" not in url and not url.startswith("//"), f"{page} loads {url} from the network"
        target = (site / page).parent / url.split("?")[0].split("#")[0]
        assert target.exists(), f"{page} loads {url}, which the site does not contain"


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


@pytest.mark.parametrize("page", PAGES)
def test_site_renders_in_headless_chromium_with_the_network_off(site, page, tmp_path):
    browser = _chromium()
    if browser is None:
        if os.environ.get("CONSTRAINED_SFT_REQUIRE_CHROMIUM"):
            pytest.fail("CONSTRAINED_SFT_REQUIRE_CHROMIUM is set but no Chromium is installed")
        pytest.skip("no Chromium installed (apt-get install chromium)")
    from PIL import Image

    shot = tmp_path / "page.png"
    cmd = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
        "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",  # the network is off
        "--window-size=1200,900", f"--screenshot={shot}", (site / page).as_uri(),
    ]  # fmt: skip
    subprocess.run(cmd, capture_output=True, timeout=hang_limit(12))
    assert shot.exists(), "Chromium wrote no screenshot"
    image = Image.open(shot).convert("RGB")
    width, height = image.size
    header = [image.getpixel((x, 20)) for x in range(0, width, 10)]
    close = sum(all(abs(a - b) <= 12 for a, b in zip(p, HEADER_RGB, strict=True)) for p in header)
    assert close > 0.8 * len(header), "the theme's header bar is not drawn: the stylesheet did not load"
    body = image.crop((0, 60, width, height)).convert("L")
    dark = sum(1 for v in body.getdata() if v < 128)
    assert dark > 0.005 * body.width * body.height, "the page body is blank"
