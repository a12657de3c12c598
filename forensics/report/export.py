"""Write figures: always an interactive HTML, and a PNG when a Chromium is on the machine.

kaleido 1.x renders PNGs in a real Chrome/Chromium. We never download one: we look for
an installed browser (`FORENSICS_CHROMIUM`, kaleido's own `BROWSER_PATH`, then the usual
names on PATH) and pass its path to kaleido. All PNGs of a report go through one browser
session, because starting the browser costs ~2.5 s and each figure only ~0.4 s after that.
Without a browser the Markdown links the HTML instead of embedding a broken image. The
export is bounded (`png_timeout`; how, in png_browser.py): a browser that hangs costs the
PNGs, never the report.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from forensics.report.png_browser import UNWIND_S, BrowserTimeout, KaleidoBrowser

log = logging.getLogger(__name__)

BROWSER_NAMES = [
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
    "chrome",
    "microsoft-edge",
]
TYPICAL_PATHS = [
    "/usr/bin/chromium",
    "/snap/bin/chromium",
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
]
ENV_VARS = ["FORENSICS_CHROMIUM", "BROWSER_PATH"]
DISABLED = {"", "0", "off", "none", "no", "false"}


@dataclass
class FigureSpec:
    """A figure to write: a stable file stem, a caption, and a builder run on demand."""

    name: str
    title: str
    build: Callable[[], go.Figure]


@dataclass
class Exported:
    """What was written for one figure; `png` is None when no PNG could be made."""

    name: str
    title: str
    html: Path
    png: Path | None


def find_chromium(environ: Mapping[str, str] = os.environ) -> tuple[str | None, str]:
    """(path to a Chrome/Chromium, "") or (None, why not). Never downloads anything."""
    for var in ENV_VARS:
        value = environ.get(var)
        if value is None:
            continue
        if value.strip().lower() in DISABLED:
            return None, f"PNG export is turned off by {var}={value!r}"
        if os.access(value, os.X_OK) and Path(value).is_file():
            return value, ""
        return None, f"{var}={value!r} is not an executable file"
    for name in BROWSER_NAMES:
        path = shutil.which(name)
        if path:
            return path, ""
    for path in TYPICAL_PATHS:
        if os.access(path, os.X_OK):
            return path, ""
    return None, (
        "no Chrome/Chromium found (looked for FORENSICS_CHROMIUM, BROWSER_PATH and "
        f"{', '.join(BROWSER_NAMES)} on PATH); install one (Debian: apt-get install chromium)"
    )


PLOTLY_JS = "plotly.min.js"


def write_plotly_js(path: Path) -> Path:
    """The one copy of plotly.js the figures of a report (or of the whole demo) load."""
    from plotly.offline import get_plotlyjs

    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(get_plotlyjs(), encoding="utf-8")
    return path


def write_html(fig: go.Figure, path: Path, div_id: str, plotly_js: Path | None = None) -> None:
    """HTML that loads one shared `plotly.min.js` (beside it, or `plotly_js`) instead of
    embedding 4.8 MB of plotly.js in every figure; it still opens offline."""
    script = write_plotly_js(plotly_js or path.parent / PLOTLY_JS)
    fig.write_html(
        path,
        include_plotlyjs=Path(os.path.relpath(script, path.parent)).as_posix(),
        full_html=True,
        div_id=div_id,
        config={"displaylogo": False, "responsive": True},
    )


def _kaleido_options(browser: str, jobs: int) -> dict[str, Any]:
    """One tab per core (at most 4); MathJax off so nothing is fetched from a CDN."""
    return {"path": browser, "mathjax": False, "n": max(1, min(jobs, os.cpu_count() or 1, 4))}


TIMEOUT_VAR = "FORENSICS_PNG_TIMEOUT"
BASE_TIMEOUT_S = 30.0  # a browser start (~2.5 s) on a heavily loaded machine, with room
PER_FIGURE_S = 5.0  # ~0.4 s a figure normally; ten times that and more
CLOSE_TIMEOUT_S = 15.0  # closing the browser of a `browser_session()`


def png_timeout(n_figures: int, environ: Mapping[str, str] = os.environ) -> float:
    """Seconds one PNG export may take: `FORENSICS_PNG_TIMEOUT`, else 30 s + 5 s a figure.

    Normal is ~2.5 s + 0.4 s a figure, so the default only trips on a browser that hangs,
    not on a slow machine. Raises ValueError (one line) on a value that is not seconds > 0.
    """
    value = environ.get(TIMEOUT_VAR, "").strip()
    if not value:
        return BASE_TIMEOUT_S + PER_FIGURE_S * n_figures
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0:  # also NaN
        raise ValueError(f"{TIMEOUT_VAR}={value!r} is not a number of seconds > 0")
    return seconds


def _limit_text(seconds: float, n_figures: int, environ: Mapping[str, str] = os.environ) -> str:
    """Which limit was hit and how to raise it, in words."""
    if environ.get(TIMEOUT_VAR, "").strip():
        return f"{seconds:g} s ({TIMEOUT_VAR}={seconds:g}; raise it to wait longer)"
    return (
        f"{seconds:g} s ({BASE_TIMEOUT_S:g} s + {PER_FIGURE_S:g} s per figure, {n_figures} "
        f"figures; raise it with {TIMEOUT_VAR}=<seconds>)"
    )


_session: KaleidoBrowser | None = None  # the browser of the open `browser_session()`


def write_pngs(figs: dict[Path, go.Figure], browser: str, timeout: float | None = None) -> None:
    """Render every figure to PNG in one kaleido (browser) session, within `timeout` seconds
    (default: `png_timeout`); past it the browser is killed and `BrowserTimeout` raised.

    Figures are rendered into a private folder and moved into place only when the whole
    export finished, so a killed export leaves no partial (or empty: kaleido claims each
    name before it renders) PNG to be linked, not even one written late by the abandoned
    call. Inside `browser_session()` its browser, already running, is used.
    """
    seconds = png_timeout(len(figs)) if timeout is None else timeout
    deadline = time.monotonic() + seconds
    why = f"PNG export with {browser} did not finish within {_limit_text(seconds, len(figs))}"
    first = next(iter(figs))
    staging = Path(tempfile.mkdtemp(prefix=".png-export-", dir=first.parent))
    try:
        staged = {staging / f"{i}.png": path for i, path in enumerate(figs)}
        jobs = [
            {"fig": fig, "path": tmp, "opts": {"format": "png", "scale": 1.5}}
            for tmp, fig in zip(staged, figs.values(), strict=True)
        ]
        _render(jobs, browser, deadline, why)
        for tmp, path in staged.items():
            if tmp.is_file() and tmp.stat().st_size > 0:
                shutil.move(tmp, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _render(jobs: list[dict[str, Any]], browser: str, deadline: float, why: str) -> None:
    """In the session's browser, or in one started (and closed) for these figures only."""
    if _session is not None:
        _session.write(jobs, deadline, why)
        return
    own = KaleidoBrowser(_kaleido_options(browser, len(jobs)))
    try:
        own.write(jobs, deadline, why)
    finally:
        own.close(max(UNWIND_S, deadline - time.monotonic()))


@contextmanager
def browser_session() -> Iterator[None]:
    """Keep one browser open for every PNG written inside (e.g. all runs of the demo).

    Starting Chromium costs ~2.5 s; a report of a few figures would otherwise pay it
    once per report. The browser starts now, in the background, while the first run is
    analysed. Without a browser this does nothing (export() then warns). Once an export
    in the session timed out, its browser is dead and every later one fails at once with
    the same warning, instead of each report waiting out its own limit.
    """
    global _session
    browser, _ = find_chromium()
    if browser is None or _session is not None:
        yield
        return
    _session = KaleidoBrowser(_kaleido_options(browser, 4))
    try:
        yield
    finally:
        session, _session = _session, None
        session.close(CLOSE_TIMEOUT_S)


def export(
    specs: list[FigureSpec],
    out_dir: Path,
    *,
    png: bool = True,
    warn: Callable[[str], None] = log.warning,
    plotly_js: Path | None = None,
) -> dict[str, Exported]:
    """Write all figures under `out_dir`; warn once if PNGs cannot be made. `plotly_js`:
    a shared plotly.min.js (the demo keeps one for all its runs); default: one in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figs = {spec.name: spec.build() for spec in specs}
    for name, fig in figs.items():
        write_html(fig, out_dir / f"{name}.html", name, plotly_js)
    pngs = {out_dir / f"{name}.png": fig for name, fig in figs.items()}
    for path in pngs:
        path.unlink(missing_ok=True)  # a stale PNG must not be linked as if it were new
    if png and pngs:
        _try_pngs(pngs, warn)
    return {
        s.name: Exported(s.name, s.title, out_dir / f"{s.name}.html", _if_written(out_dir, s.name))
        for s in specs
    }


def _try_pngs(pngs: dict[Path, go.Figure], warn: Callable[[str], None]) -> None:
    """Write the PNGs or warn once why not: no browser, a bad limit, a timeout, a failure."""
    browser, why = find_chromium()
    if browser is None:
        warn(
            f"{why}; figures are written as interactive HTML only and linked from the "
            f"Markdown. Fix: run `plotly_get_chrome` (installs Chrome for kaleido) or install "
            "the OS package (Debian/Ubuntu: apt-get install chromium), then re-run `forensics "
            "report`"
        )
        return
    try:
        seconds = png_timeout(len(pngs))
    except ValueError as exc:
        warn(f"{exc}; figures are written as interactive HTML only and linked from the Markdown")
        return
    try:
        write_pngs(pngs, browser, seconds)
    except BrowserTimeout as exc:
        warn(
            f"{exc}; the browser was killed and figures are interactive HTML only, linked "
            "from the Markdown"
        )
    except Exception as exc:  # noqa: BLE001 - any browser failure must only cost the PNGs
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        warn(f"PNG export with {browser} failed ({first}); the Markdown links the HTML figures")


def _if_written(out_dir: Path, name: str) -> Path | None:
    path = out_dir / f"{name}.png"
    return path if path.is_file() and path.stat().st_size > 0 else None
