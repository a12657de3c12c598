"""Fixtures of the report tests: the run store of reportdb.py, built once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from reportdb import build_store

from forensics.report import ReportResult, write_report
from forensics.store import open_store
from forensics.store.db import Store


@pytest.fixture(scope="session")
def report_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("report") / "runs.duckdb")


@pytest.fixture
def store(report_db: Path) -> Iterator[Store]:
    with open_store(report_db, read_only=True) as s:
        yield s


@pytest.fixture(scope="session")
def full(report_db: Path, tmp_path_factory: pytest.TempPathFactory) -> ReportResult:
    """The fp16 run's report with PNGs (when a browser exists), written once per session."""
    out = tmp_path_factory.mktemp("full")
    with open_store(report_db, read_only=True) as store:
        return write_report(store, "gpt-1b-fp16", out, gpu_hour_cost=2.5, warn=lambda _m: None)
