"""Fixtures shared by every feature's tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
REAL_LOGS = REPO.parent / "shared" / "real_logs"
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def real_logs() -> Path:
    """The real public training logs (../shared/real_logs); skip where that folder is absent."""
    if not REAL_LOGS.is_dir():
        pytest.skip(
            f"real logs not available: {REAL_LOGS} does not exist (it sits beside the repo)"
        )
    return REAL_LOGS


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def tmp_db(tmp_path: Path) -> Path:
    return tmp_path / "test.duckdb"


@pytest.fixture
def no_png(monkeypatch: pytest.MonkeyPatch) -> None:
    """PNG export off (FORENSICS_CHROMIUM=off) for tests that read the store, the Markdown
    or the HTML figures, never a PNG: starting a browser per report costs ~10 s under load
    (a 4-test file went from 58 s to 12 s). The PNG path has its own tests
    (tests/report/test_report_write.py, test_png_timeout.py, test_report_browser.py)."""
    monkeypatch.setenv("FORENSICS_CHROMIUM", "off")


@pytest.fixture
def analyzed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[Path, Path]]:
    """`analyzed(path, ..., **AnalyzeOptions fields)`: `forensics analyze` of the paths
    without replay into tmp_path/out and tmp_path/f.duckdb; returns (out, db). PNG export is
    off: these tests read the Markdown, and a browser under load is slow to start."""
    from forensics.analyze import AnalyzeOptions, analyze

    monkeypatch.setenv("FORENSICS_CHROMIUM", "off")

    def run(*paths: Path, **options: Any) -> tuple[Path, Path]:
        out, db = tmp_path / "out", tmp_path / "f.duckdb"
        analyze(list(paths), out=out, db=db, options=AnalyzeOptions(replay=False, **options))
        return out, db

    return run
