"""`dedup report --html`: the page opened in a real headless Chromium (Debian's), through playwright.

The page must load with no console error, no page error and no request off the
file (it is self-contained), and plotly must have drawn every figure. Without a
Chromium the test skips, saying why; with DEDUP_REQUIRE_BROWSER=1 (set by
.ci/run) it fails instead, so CI never passes by skipping.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from streams.reporting.html import FIGURES
from tests.test_report import day_of_links, dedup, link, write_links

RENDER_TIMEOUT_MS = 30_000


def chromium() -> str:
    """The Chromium to drive, or a skip (a failure under DEDUP_REQUIRE_BROWSER=1) saying what is missing."""
    problem = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problem = "playwright is not installed: pip install -e '.[test]'"
    found = os.environ.get("DEDUP_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if problem is None and not found:
        problem = "no Chromium found: apt-get install chromium (or set DEDUP_CHROMIUM)"
    if problem is None and found:
        return found
    if os.environ.get("DEDUP_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{problem} (DEDUP_REQUIRE_BROWSER=1 requires the browser test)")
    pytest.skip(problem)


@dataclass
class PageCheck:
    errors: list[str] = field(default_factory=list)
    """Console errors, page errors and requests that left the file."""
    figures: dict[str, dict[str, float]] = field(default_factory=dict)
    """Figure id -> what the browser drew: plotly SVGs, drawn traces, the SVG's width and height."""


def open_page(browser_path: str, page_file: Path, timeout_ms: int = RENDER_TIMEOUT_MS) -> PageCheck:
    """Load the page, wait until every figure has plotly's SVG (or the timeout), and say what happened."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    check = PageCheck()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: m.type == "error" and check.errors.append(f"console: {m.text}"))
            page.on("pageerror", lambda e: check.errors.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: check.errors.append(f"request failed: {r.url}"))
            page.on("request", lambda r: r.url.startswith("file:") or check.errors.append(f"request: {r.url}"))
            page.goto(page_file.as_uri(), wait_until="load")
            with contextlib.suppress(PlaywrightTimeout):  # the figures below say which ones are missing
                page.wait_for_function(
                    "Array.from(document.querySelectorAll('div.figure')).every("
                    "f => f.querySelector('svg.main-svg') !== null)",
                    timeout=timeout_ms,
                )
            check.figures = page.evaluate(
                """() => Object.fromEntries(Array.from(document.querySelectorAll('div.figure')).map(f => {
                    const svg = f.querySelector('svg.main-svg');
                    const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
                    return [f.id, {svgs: f.querySelectorAll('svg.main-svg').length,
                                   traces: f.querySelectorAll('g.trace, g.barlayer path, g.scatterlayer path').length,
                                   width: box.width, height: box.height}];
                }))"""
            )
        finally:
            browser.close()
    return check


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML report of two days of every stage, relinks and an alarm, written by the command."""
    folder = tmp_path_factory.mktemp("html-report")
    records = day_of_links("2026-03-03", 10, 40) + day_of_links("2026-03-04", 40, 10, big_group=12)
    records += [
        link("2026-03-04-h0", "duplicate", "2026-03-04-c50", "simhash", 3, "2026-03-04T13:00:00Z"),
        link("2026-03-04-h1", "review", "2026-03-04-c51", "simhash", 5, "2026-03-04T13:00:00Z"),
        link("2026-03-04-x0", "duplicate", "2026-03-04-c52", "semantic", 0.88, "2026-03-04T13:00:00Z", "bn"),
        link("2026-03-04-x1", "review", "2026-03-04-c53", "semantic", 0.84, "2026-03-04T13:00:00Z", "bn"),
        link("2026-03-04-s1", "unlinked", at="2026-03-04T14:00:00Z", decided_by="person"),
    ]
    links = write_links(folder / "links.jsonl", records)
    page = folder / "report.html"
    result = dedup("report", str(links), "--html", str(page))
    assert result.returncode == 0, result.stderr
    assert f"wrote {page}" in result.stderr
    return page


def test_the_html_report_loads_without_errors_and_shows_every_figure(report_page: Path) -> None:
    browser_path = chromium()
    assert "Drift alarm" in report_page.read_text(encoding="utf-8")
    check = open_page(browser_path, report_page)
    assert check.errors == []
    assert list(check.figures) == list(FIGURES)
    for figure_id, drawn in check.figures.items():
        assert drawn["svgs"] >= 1, f"plotly drew no SVG for {figure_id}"
        assert drawn["traces"] >= 1, f"figure {figure_id} has no trace drawn"
        assert drawn["width"] > 300 and drawn["height"] > 200, f"figure {figure_id} is {drawn}"


def test_the_check_sees_a_broken_page(report_page: Path, tmp_path: Path) -> None:
    """The browser check itself can fail: a script error and a figure plotly never drew are caught."""
    browser_path = chromium()
    broken = tmp_path / "broken.html"
    text = report_page.read_text(encoding="utf-8")
    text = text.replace("</body>", '<div class="figure" id="never-drawn"></div><script>notDefined();</script></body>')
    broken.write_text(text, encoding="utf-8")
    check = open_page(browser_path, broken, timeout_ms=5_000)
    assert any("notDefined" in error for error in check.errors), check.errors
    assert check.figures["never-drawn"]["svgs"] == 0
