"""Fixtures shared by every feature's tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
REAL_LOGS = REPO.parent / "shared" / "real_logs"
FIXTURES = REPO / "tests" / "fixtures"


def _one_torch_thread_per_worker() -> None:
    """Under pytest-xdist, each worker gets its share of the cores for torch's CPU threads
    (OMP_NUM_THREADS, read when torch is imported; a value already set is kept). torch's
    default, one thread per core in every worker, oversubscribes CI's two cores with its two
    workers: an HF Trainer fixture took 83 s instead of 17 s on a loaded two-core machine.
    The simulator pins one thread itself (TrainConfig.threads), so its numbers do not move;
    before, the other training tests ran on 1 or 2 threads depending on whether a simulator
    test had run earlier in the same worker."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 0:
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))


_one_torch_thread_per_worker()


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
def analyzed(tmp_path: Path, no_png: None) -> Callable[..., tuple[Path, Path]]:
    """`analyzed(path, ..., **AnalyzeOptions fields)`: `forensics analyze` of the paths
    without replay into tmp_path/out and tmp_path/f.duckdb; returns (out, db). PNG export is
    off: these tests read the Markdown, and a browser under load is slow to start."""
    from forensics.analyze import AnalyzeOptions, analyze

    def run(*paths: Path, **options: Any) -> tuple[Path, Path]:
        out, db = tmp_path / "out", tmp_path / "f.duckdb"
        analyze(list(paths), out=out, db=db, options=AnalyzeOptions(replay=False, **options))
        return out, db

    return run
