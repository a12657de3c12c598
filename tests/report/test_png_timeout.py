"""A hung or broken browser costs the PNGs, never the report: PNG export is bounded.

The "browser" here is a shell script that records its pid (and its parent's: the wrapper
choreographer runs it in) and then sleeps without ever answering on the DevTools pipe, as
the Chromium did that once hung `forensics report` and CI. Each case runs in a subprocess
with a timeout, so that on code without the bound the test fails instead of hanging CI.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import forensics
from forensics.report import ReportResult
from forensics.report.export import PER_FIGURE_S, TIMEOUT_VAR, png_timeout

pytestmark = pytest.mark.skipif(os.name == "nt", reason="the fake browser is a POSIX shell script")

ROOT = Path(forensics.__file__).resolve().parents[1]  # the code under test, for the subprocess
LIMIT_S = 2  # FORENSICS_PNG_TIMEOUT in these tests
BOUND_S = 30.0  # the report's default limit is 30 s + 5 s a figure: 60 s for its 6 figures
HUNG = "#!/bin/sh\necho $$ $PPID >> {pids}\nexec sleep 600\n"
CRASHES = "#!/bin/sh\necho $$ $PPID >> {pids}\nexit 3\n"


def fake_browser(tmp_path: Path, script: str) -> tuple[Path, Path]:
    """(the executable, the file where each start appends its pid and its wrapper's pid)."""
    pids = tmp_path / "browser.pids"
    exe = tmp_path / "chromium"
    exe.write_text(script.format(pids=pids))
    exe.chmod(0o755)
    return exe, pids


def run(
    args: list[str], browser: Path, pids: Path, limit_s: float = LIMIT_S
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run python `args` with the fake browser and a limit of `limit_s`; (result, seconds)."""
    env = {
        **os.environ,
        "FORENSICS_CHROMIUM": str(browser),
        TIMEOUT_VAR: str(limit_s),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, *args], env=env, capture_output=True, text=True, timeout=90
        )
    finally:
        if pids.exists():
            kill_leftovers(pids)
    return done, time.monotonic() - start


def started(pids: Path) -> list[int]:
    return [int(p) for p in pids.read_text().split()] if pids.exists() else []


def alive(pid: int) -> bool:
    """Running (a zombie is not: in a container nobody may reap an orphan)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def still_alive(pids: Path) -> list[int]:
    """The fake browser processes (script and wrapper) left running, after up to 5 s."""
    deadline = time.monotonic() + 5
    while (left := [p for p in started(pids) if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def kill_leftovers(pids: Path) -> None:
    """Record what is still running (for `left_behind`), then kill it: a failing test must
    not leave a fake browser behind either."""
    left = still_alive(pids)
    (pids.parent / "left.pids").write_text(" ".join(map(str, left)))
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def left_behind(pids: Path) -> list[int]:
    return [int(p) for p in (pids.parent / "left.pids").read_text().split()]


def test_report_command_survives_a_browser_that_never_answers(
    report_db: Path, tmp_path: Path
) -> None:
    browser, pids = fake_browser(tmp_path, HUNG)
    out = tmp_path / "rep"
    cli = ["-c", "from forensics.cli import app; app()", "report", "--db", str(report_db)]
    done, seconds = run([*cli, "--out", str(out), "--run", "gpt-1b-fp16"], browser, pids)

    assert done.returncode == 0, done.stderr
    assert seconds < BOUND_S, f"took {seconds:.1f} s"
    assert started(pids), "the fake browser was never started"
    assert left_behind(pids) == [], "a browser process outlived the export"
    warnings = [line for line in done.stderr.splitlines() if "did not finish" in line]
    assert len(warnings) == 1, done.stderr
    assert f"within {LIMIT_S} s ({TIMEOUT_VAR}={LIMIT_S}; raise it" in warnings[0]
    assert "interactive HTML only" in warnings[0]
    assert not list(out.rglob("*.png")), "a PNG of the abandoned export was left"
    assert not list(out.rglob(".png-export-*")), "the staging folder was left"
    figures = sorted(p.name for p in (out / "figures").glob("*.html"))
    assert "run-overview.html" in figures and len(figures) == 6
    text = "\n".join(p.read_text() for p in out.rglob("*.md"))
    assert ".png)" not in text and "figures/run-overview.html" in text


SESSION = """
import sys, time
from pathlib import Path
import plotly.graph_objects as go
from forensics.report.export import FigureSpec, browser_session, export
specs = [FigureSpec("a", "A", lambda: go.Figure(go.Scatter(y=[1, 3, 2])))]
with browser_session():
    for i in range(3):
        start = time.monotonic()
        export(specs, Path(sys.argv[1]) / str(i), warn=lambda m: print("warning:", m))
        print("seconds:", time.monotonic() - start)
"""


def test_a_session_waits_for_a_hung_browser_once(tmp_path: Path) -> None:
    """The demo keeps one browser for all its reports: the first export waits out the limit,
    the later ones fail at once with the same warning, and the session still ends."""
    browser, pids = fake_browser(tmp_path, HUNG)
    done, seconds = run(["-c", SESSION, str(tmp_path / "out")], browser, pids)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    times = [float(line.split()[1]) for line in lines if line.startswith("seconds:")]
    warnings = {line for line in lines if line.startswith("warning:")}
    assert len(times) == 3 and times[0] >= LIMIT_S and max(times[1:]) < 1.0, lines
    assert len(warnings) == 1 and "did not finish" in warnings.pop(), lines
    assert seconds < BOUND_S
    assert len(started(pids)) == 2, "one browser for the whole session"
    assert left_behind(pids) == []
    assert not list((tmp_path / "out").rglob("*.png"))
    assert done.stderr.strip() == "", done.stderr  # no tracebacks, no stray warnings


ONE_EXPORT = """
import sys
from pathlib import Path
import plotly.graph_objects as go
from forensics.report.export import FigureSpec, export
specs = [FigureSpec("a", "A", lambda: go.Figure(go.Scatter(y=[1, 3, 2])))]
export(specs, Path(sys.argv[1]), warn=lambda m: print("warning:", m))
"""


def test_a_browser_that_exits_at_once_fails_fast(tmp_path: Path) -> None:
    """A browser that dies on start is a failure, not a wait for the limit. The limit here
    (300 s) is beyond the subprocess's own timeout (90 s): code that waited it out fails
    the test, with no timing of ours to flake on a loaded machine (a 15 s bound did, the
    export's imports taking 15.4 s under load); the warning says "failed", not "did not
    finish within"."""
    browser, pids = fake_browser(tmp_path, CRASHES)
    done, _ = run(["-c", ONE_EXPORT, str(tmp_path / "out")], browser, pids, limit_s=300)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stdout.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "failed" in warnings[0], done.stdout
    assert "did not finish" not in warnings[0]
    assert left_behind(pids) == []
    assert (tmp_path / "out" / "a.html").is_file() and not (tmp_path / "out" / "a.png").exists()


def test_png_timeout_scales_with_figures_and_reads_the_variable() -> None:
    assert png_timeout(6, {}) == png_timeout(0, {}) + 6 * PER_FIGURE_S
    assert png_timeout(6, {TIMEOUT_VAR: "2.5"}) == 2.5
    for bad in ["0", "-1", "soon", "nan"]:
        with pytest.raises(ValueError, match=TIMEOUT_VAR):
            png_timeout(6, {TIMEOUT_VAR: bad})


def test_a_finished_export_leaves_no_staging_folder(full: ReportResult) -> None:
    assert not list(full.out_dir.rglob(".png-export-*"))
