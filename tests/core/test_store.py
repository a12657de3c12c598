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
        store.insert_metrics(_rows("r", [1.0, math.nan, math.inf, -math.inf]))
        values = store.metrics_long("r")["value"].to_list()
        wide = store.metrics_frame("r")
    assert values[0] == 1.0 and math.isnan(values[1])
    assert values[2] == math.inf and values[3] == -math.inf
    assert math.isnan(wide["loss"][1]) and wide["loss"][2] == math.inf


def test_failed_transaction_keeps_what_was_stored(tmp_db: Path) -> None:
    with open_store(tmp_db) as store:
        store.upsert_run("r", "x.jsonl", "jsonl", {"beta2": 0.95})
        store.insert_metrics(_rows("r", [1.0, 2.0]))
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


def test_metrics_view_groups_series_into_dense_blocks(tmp_db: Path) -> None:
    """Series logged at the same steps share a block; a sparse one gets its own rows."""
    every = _rows("r", [1.0, 2.0, 3.0, 4.0])
    grad = every.with_columns(pl.lit("grad_norm").alias("metric"), pl.lit("gn").alias("raw_name"))
    val = _rows("r", [9.0, 8.0]).with_columns(
        pl.Series("step", [1, 3]), pl.lit("val_loss").alias("metric"), pl.lit("v").alias("raw_name")
    )
    with open_store(tmp_db) as store:
        assert store.insert_metrics(pl.concat([every, grad, val])) == 10
        blocks = store.query(
            "SELECT block_id, count(*) AS n FROM metric_columns GROUP BY ALL ORDER BY 1"
        )["n"].to_list()
        rows = store.query("SELECT count(*) AS n FROM metric_rows")["n"][0]
        val_loss = store.metrics_long("r", ["val_loss"])
    assert blocks == [2, 1] and rows == 4 + 2
    assert val_loss["step"].to_list() == [1, 3] and val_loss["value"].to_list() == [9.0, 8.0]


def test_clear_source_removes_its_values_only(tmp_db: Path) -> None:
    other = _rows("r", [5.0]).with_columns(pl.lit("y.jsonl").alias("source"))
    with open_store(tmp_db) as store:
        store.insert_metrics(pl.concat([_rows("r", [1.0, 2.0]), other]))
        store.clear_source("r", "x.jsonl")
        left = store.query("SELECT source, value FROM metrics").rows()
        orphans = store.query(
            "SELECT count(*) AS n FROM metric_rows WHERE block_id NOT IN "
            "(SELECT block_id FROM metric_columns)"
        )["n"][0]
    assert left == [("y.jsonl", 5.0)] and orphans == 0


def test_metrics_is_written_only_through_insert_metrics(tmp_db: Path) -> None:
    with open_store(tmp_db) as store, pytest.raises(StoreError, match="insert_metrics"):
        store.insert_frame("metrics", _rows("r", [1.0]))


def test_schema_1_metrics_table_is_migrated(tmp_db: Path) -> None:
    import duckdb

    con = duckdb.connect(str(tmp_db))
    con.execute(
        "CREATE TABLE metrics (run_id VARCHAR NOT NULL, step BIGINT NOT NULL, "
        "metric VARCHAR NOT NULL, value DOUBLE, wall_time DOUBLE, raw_name VARCHAR NOT NULL, "
        "source VARCHAR NOT NULL)"
    )
    con.execute(
        "INSERT INTO metrics VALUES ('r', 1, 'loss', 'NaN', NULL, 'train/loss', 'x'), "
        "('r', 2, 'loss', 2.5, 10.0, 'train/loss', 'x'), ('r', 1, 'lr', 0.1, NULL, 'lr', 'x')"
    )
    con.close()
    with open_store(tmp_db) as store:
        rows = store.query(
            "SELECT step, metric, value, wall_time FROM metrics ORDER BY metric, step"
        ).rows()
    assert rows[1:] == [(2, "loss", 2.5, 10.0), (1, "lr", 0.1, None)]
    assert rows[0][:2] == (1, "loss") and math.isnan(rows[0][2])


def test_frames_cross_to_duckdb_and_back_without_pyarrow(tmp_db: Path) -> None:
    """forensics/store/arrow.py: frames go both ways through the Arrow C stream; a column of
    polars' Null type (all None: DuckDB's stream import rejects it) through pyarrow. NaN,
    Inf and nulls survive either way."""
    from forensics.store.arrow import scannable, to_polars

    rows = [(1, "a", math.nan), (2, None, math.inf)]
    typed = pl.DataFrame(rows, schema=["k", "s", "v"], orient="row")
    all_none = pl.DataFrame([(3, None, None)], schema=["k", "s", "v"], orient="row")
    assert type(scannable(typed)).__name__ == "_Stream"
    with open_store(tmp_db) as store:
        store.con.execute("CREATE TABLE t (k BIGINT, s VARCHAR, v DOUBLE)")
        for frame in (typed, all_none):
            arrow = scannable(frame)  # noqa: F841 - the replacement scan below reads it
            store.con.execute("INSERT INTO t SELECT k, s, v FROM arrow")
        back = to_polars(store.con.sql("SELECT * FROM t ORDER BY k"))
    assert back["k"].to_list() == [1, 2, 3] and back["s"].to_list() == ["a", None, None]
    v = back["v"].to_list()
    assert math.isnan(v[0]) and v[1] == math.inf and v[2] is None


def _columns(db: Path, table: str) -> list[tuple[str, str]]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return [(r[0], r[1]) for r in con.execute(f"DESCRIBE {table}").fetchall()]
    finally:
        con.close()


def test_an_older_store_is_upgraded_to_what_a_new_store_holds(tmp_path: Path) -> None:
    """A new store is created in one batch with the added columns inside its CREATE TABLEs;
    a store written before them (no `conflicts` table, `incidents` without the issue-11
    columns, no schema fingerprint in `meta`) gets the same tables and columns, in the same
    order, on its next open; and keeps its rows."""
    import duckdb

    from forensics.store.schema import ALL_DDL

    new, old = tmp_path / "new.duckdb", tmp_path / "old.duckdb"
    open_store(new).close()
    con = duckdb.connect(str(old))
    for ddl in ALL_DDL:
        if "conflicts (" not in ddl and "wide" not in ddl:
            con.execute(ddl)
    con.execute("INSERT INTO meta VALUES ('schema_version', '3')")
    con.execute("INSERT INTO runs (run_id, name) VALUES ('r', 'r')")
    con.close()
    assert "severity" not in dict(_columns(old, "incidents"))
    with open_store(old) as store:
        assert store.run_names() == ["r"]
    for table in ("incidents", "conflicts", "runs", "metric_rows"):
        assert _columns(old, table) == _columns(new, table), table
    with open_store(old) as store:  # the second open finds its fingerprint: nothing to do
        marker = store.con.execute("SELECT value FROM meta WHERE key = 'schema_ddl'").fetchall()
    assert marker and len(marker[0][0]) == 64


def test_a_stale_schema_fingerprint_recreates_the_views(tmp_db: Path) -> None:
    """The fingerprint in `meta` is what lets an open skip the DDL; one that does not match
    this code's schema (an older or newer forensics wrote the store) runs it all again."""
    with open_store(tmp_db) as store:
        store.con.execute("DROP VIEW metrics_wide")
        store.con.execute("UPDATE meta SET value = 'stale' WHERE key = 'schema_ddl'")
    with open_store(tmp_db) as store:
        assert store.metrics_frame("nothing").height == 0  # reads metrics_wide
