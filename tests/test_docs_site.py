"""The documentation site builds offline without a warning and really renders in a browser."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from context_engine import ContextEngine
from tests.cli._png import distinct_colours, read_png

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium")

pytestmark = pytest.mark.extra("docs")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built the way `make docs` builds it (``--strict``: any warning fails)."""
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return target


def test_site_builds_without_warnings(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "api" / "engine.html").is_file()


def test_changelog_page_includes_the_changelog_with_working_links(site: Path) -> None:
    page = (site / "changelog.html").read_text(encoding="utf-8")
    first_entry = next(
        line[2:]
        for line in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("- ")
    )
    words = re.sub(r"[`*\[\]]", "", first_entry).split()[:6]
    assert " ".join(words) in html.unescape(re.sub(r"<[^>]+>", "", page))
    # CHANGELOG.md links docs/benchmarks.md from the repository root; on the site that is a page.
    assert 'href="benchmarks.html"' in page


def test_site_loads_nothing_from_the_network(site: Path) -> None:
    """No web fonts, scripts or stylesheets from elsewhere: the site works offline."""
    remote = re.compile(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"(?:https?:)?//", re.I)
    for page in site.rglob("*.html"):
        found = remote.search(page.read_text(encoding="utf-8"))
        assert found is None, f"{page.relative_to(site)} loads {found.group(0)}"
    for sheet in site.rglob("*.css"):
        assert "fonts.googleapis" not in sheet.read_text(encoding="utf-8"), sheet


def _chromium(
    site: Path, page: str, tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1280,1000",
            *args,
            (site / page).as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def _screenshot(site: Path, page: str, tmp_path: Path) -> tuple[int, int, list[bytes], int]:
    shot = tmp_path / "shot.png"
    _chromium(site, page, tmp_path, f"--screenshot={shot}")
    assert shot.exists(), f"chromium wrote no screenshot of {page}"
    width, height, rows = read_png(shot)
    return width, height, rows, len(rows[0]) // width


def _styled_header(rows: list[bytes], bpp: int) -> bool:
    """Whether the top of the page is a coloured bar: the theme's stylesheet was applied."""
    r, g, b = rows[10][640 * bpp : 640 * bpp + 3]
    return max(r, g, b) - min(r, g, b) > 60


def _dom(site: Path, page: str, tmp_path: Path) -> str:
    return _chromium(site, page, tmp_path, "--dump-dom").stdout


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_home_page_renders_in_headless_chromium(site: Path, tmp_path: Path) -> None:
    width, height, rows, bpp = _screenshot(site, "index.html", tmp_path)
    assert (width, height) == (1280, 1000)
    assert distinct_colours(rows, bpp, step=4) > 100, "the home page looks blank"
    assert _styled_header(rows, bpp), "the home page has no theme (stylesheet not loaded?)"
    dom = _dom(site, "index.html", tmp_path)
    assert "<title>context-engine</title>" in dom
    for section in ("Getting started", "Strategies", "Integrations", "API reference"):
        assert section in dom, f"the navigation has no {section}"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_api_page_renders_docstrings_in_headless_chromium(site: Path, tmp_path: Path) -> None:
    _, _, rows, bpp = _screenshot(site, "api/engine.html", tmp_path)
    assert distinct_colours(rows, bpp, step=4) > 100, "the API page looks blank"
    assert _styled_header(rows, bpp), "the API page has no theme (stylesheet not loaded?)"
    dom = html.unescape(_dom(site, "api/engine.html", tmp_path))
    assert "<title>Engine - context-engine</title>" in dom
    # The class's docstring and a method's, as the source says them today.
    for documented in (ContextEngine, ContextEngine.project):
        summary = (documented.__doc__ or "").strip().splitlines()[0]
        assert summary, f"{documented.__qualname__} has no docstring"
        assert summary in dom, f"{documented.__qualname__}'s docstring is missing from the page"
    assert 'id="context_engine.ContextEngine.project"' in dom
