"""Fixtures shared by every feature's tests."""

from __future__ import annotations

from pathlib import Path

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
