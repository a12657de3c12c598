"""The interactive HTML figures open in a real headless Chromium without console errors.

Method: `chromium --headless --dump-dom --enable-logging=stderr --v=0`; Chromium logs every
console message and uncaught exception of the page to stderr as `...:CONSOLE:N] "text"`.
A positive control (a page that logs an error and throws) proves the method sees errors
on this Chromium before the real figures are judged by it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from forensics.report import ReportResult
from forensics.report.export import find_chromium

BROWSER, WHY_NOT = find_chromium()
pytestmark = pytest.mark.skipif(BROWSER is None, reason=f"no headless browser: {WHY_NOT}")
CONSOLE = re.compile(r":CONSOLE[:(]\d+\)?\]|Uncaught")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=5000",
    "--dump-dom",
]


def open_page(page: Path, profile: Path) -> tuple[str, list[str]]:
    """(DOM after scripts ran, console lines) for a local page."""
    assert BROWSER is not None
    done = subprocess.run(
        [BROWSER, *FLAGS, f"--user-data-dir={profile}", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=90,
    )
    console = [line for line in done.stderr.splitlines() if CONSOLE.search(line)]
    return done.stdout, console


def test_method_catches_console_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><script>console.error("boom"); nope();</script></body></html>')
    dom, console = open_page(bad, tmp_path / "profile")
    assert "<body>" in dom
    assert any("boom" in line for line in console), console
    assert any("Uncaught ReferenceError" in line for line in console), console


def test_figure_html_renders_a_plot_without_console_errors(
    full: ReportResult, tmp_path: Path
) -> None:
    page = next(f.html for f in full.figures if f.name == "spike-03-metrics")
    dom, console = open_page(page, tmp_path / "profile")
    assert not console, console
    assert 'class="plot-container plotly"' in dom and "main-svg" in dom
    assert dom.count('class="scatterlayer') >= 1
