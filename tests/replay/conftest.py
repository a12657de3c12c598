"""Fixtures of the replay tests: the tiny rare-token run, built and ingested once per session.

Each test gets its own copy of the database, so tests can break it in their own way.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from replay_helpers import FINDINGS, RARE_STEP, RUN, add_incident, build_run

from forensics.ingest import ingest
from forensics.store import open_store


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_run(tmp_path_factory.mktemp("tiny_run"))


@pytest.fixture(scope="session")
def master_db(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("db") / "tiny.duckdb"
    with open_store(db) as store:
        ingest(store, [tiny_run], run=RUN)
        add_incident(store, 1, RARE_STEP, "data_corruption", 0.8, FINDINGS)
    return db


@pytest.fixture
def db(master_db: Path, tmp_path: Path) -> Path:
    """A private copy of the ingested database with incident 1 (the rare batch)."""
    path = tmp_path / "tiny.duckdb"
    shutil.copy(master_db, path)
    return path
