"""Helpers for the hardening tests: ingest through the real pipeline, run the real CLI."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.ingest import ingest
from forensics.store import open_store


def ingest_paths(db: Path, *paths: Path, run: str | None = None) -> list[object]:
    with open_store(db) as store:
        return list(ingest(store, list(paths), run=run))


def metrics(db: Path, sql_where: str = "true") -> pl.DataFrame:
    with open_store(db, read_only=True) as store:
        return store.query(
            f"SELECT run_id, step, metric, value, raw_name, source FROM metrics WHERE {sql_where} "
            "ORDER BY run_id, metric, step, source"
        )


def table(db: Path, sql: str) -> pl.DataFrame:
    with open_store(db, read_only=True) as store:
        return store.query(sql)


def cli(*args: str) -> tuple[int, str]:
    """Exit code and stderr+stdout of one `forensics` command."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def assert_one_line_error(code: int, output: str, *names: str) -> None:
    """A non-zero exit, `error:` on one line naming each of `names`, no traceback."""
    assert code != 0, output
    assert "Traceback" not in output, output
    lines = [ln for ln in output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, output
    for name in names:
        assert name in lines[0], lines[0]
    assert len(lines[0]) <= 320, len(lines[0])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store.duckdb"
