"""The run store: schema, NaN preservation, transactions, the wide view."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from forensics.errors import RunNotFoundError, StoreError
from forensics.store import SCHEMA_VERSION, open_store


def _rows(run: str, values: list[float]) -> pl.DataFrame:
    n = len(values)
    return pl.DataFrame(
        {
            "run_id": [run] * n,
            "step": list(range(n)),
            "metric": ["loss"] * n,
            "value": values,
            "wall_time": [None] * n,
            "raw_name": ["train/loss"] * n,
            "source": ["x.jsonl"] * n,
        },
        schema_overrides={"wall_time": pl.Float64},
    )


def test_schema_version_recorded(tmp_db: Path) -> None:
    with open_store(tmp_db) as store:
        (version,) = store.con.execute(
            "SELECT value FROM meta WHERE key = 'schema_version'"
        ).fetchone()
    assert version == str(SCHEMA_VERSION)


def test_nan_and_inf_are_stored_not_nulled(tmp_db: Path) -> None:
    with open_store(tmp_db) as store:
        store.upsert_run("r", "x.jsonl", "jsonl", {})
        store.insert_frame("metrics", _rows("r", [1.0, math.nan, math.inf, -math.inf]))
        values = store.metrics_long("r")["value"].to_list()
        wide = store.metrics_frame("r")
    assert values[0] == 1.0 and math.isnan(values[1])
    assert values[2] == math.inf and values[3] == -math.inf
    assert math.isnan(wide["loss"][1]) and wide["loss"][2] == math.inf


def test_failed_transaction_keeps_what_was_stored(tmp_db: Path) -> None:
    with open_store(tmp_db) as store:
        store.upsert_run("r", "x.jsonl", "jsonl", {"beta2": 0.95})
        store.insert_frame("metrics", _rows("r", [1.0, 2.0]))
        with pytest.raises(RuntimeError), store.transaction():
            store.clear_source("r", "x.jsonl")
            raise RuntimeError("reader failed half-way")
        assert store.metrics_long("r").height == 2
        assert store.run_config("r") == {"beta2": 0.95}


def test_config_merges_across_sources(tmp_db: Path) -> None:
    with open_store(tmp_db) as store:
        store.upsert_run("r", "a", "jsonl", {"beta2": 0.95})
        store.upsert_run("r", "b", "jsonl", {"peak_lr": 3e-4})
        assert store.run_config("r") == {"beta2": 0.95, "peak_lr": 3e-4}


def test_resolve_run_names_the_known_runs(tmp_db: Path) -> None:
    with open_store(tmp_db) as store:
        store.upsert_run("a", "a", "jsonl", {})
        store.upsert_run("b", "b", "jsonl", {})
        assert store.resolve_run("a") == "a"
        with pytest.raises(RunNotFoundError, match='no run named "c".*known runs: a, b'):
            store.resolve_run("c")
        with pytest.raises(StoreError, match="pass --run"):
            store.resolve_run(None)


def test_read_only_open_of_missing_db_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        open_store(tmp_path / "nope.duckdb", read_only=True)
