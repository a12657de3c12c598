"""Open the DuckDB store and read/write it for every stage.

All writes of one ingest happen inside one transaction: a failed ingest rolls back and
leaves what was stored before untouched.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from forensics.canon import alias_table
from forensics.errors import RunNotFoundError, StoreError
from forensics.store.schema import ALL_DDL, PER_SOURCE_TABLES, SCHEMA_VERSION, wide_view_sql

METRIC_COLUMNS = ["run_id", "step", "metric", "value", "wall_time", "raw_name", "source"]


class Store:
    """A DuckDB connection plus the handful of reads and writes the stages share."""

    def __init__(self, path: Path | str, *, read_only: bool = False) -> None:
        self.path = Path(path)
        if read_only and not self.path.exists():
            raise StoreError(f'"{self.path}" does not exist; run `forensics ingest` first')
        try:
            self.con = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.Error as exc:
            msg = str(exc).splitlines()[0]
            raise StoreError(f'cannot open "{self.path}": {msg}') from exc
        if not read_only:
            self._ensure_schema()

    def _ensure_schema(self) -> None:
        for ddl in ALL_DDL:
            self.con.execute(ddl)
        self.con.execute(
            "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
        )
        self.con.execute(wide_view_sql(alias_table().names()))

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """All-or-nothing: on any exception the DB is left as it was."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield self.con
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    # ----- runs -------------------------------------------------------------------------
    def run_names(self) -> list[str]:
        return [r[0] for r in self.con.execute("SELECT name FROM runs ORDER BY name").fetchall()]

    def resolve_run(self, name: str | None) -> str:
        """The run_id for `name`; with no name, the only run (an error when there are several)."""
        names = self.run_names()
        if name is None:
            if len(names) == 1:
                return names[0]
            if not names:
                raise RunNotFoundError(self.path, "(any)", names)
            raise StoreError(
                f'"{self.path}" holds {len(names)} runs ({", ".join(names)}); pass --run NAME'
            )
        if name not in names:
            raise RunNotFoundError(self.path, name, names)
        return name

    def upsert_run(
        self, name: str, source_path: str, fmt: str, config: dict[str, Any] | None
    ) -> str:
        """Create the run or update its source/format/config; the run_id is its name."""
        now = datetime.now(UTC).replace(tzinfo=None)
        merged = self.run_config(name)
        merged.update(config or {})
        self.con.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?)",
            [name, name, source_path, fmt, json.dumps(merged, default=str), now],
        )
        return name

    def run_overview(self) -> pl.DataFrame:
        """One row per run: name, format, metric rows, first and last step."""
        return self.table(
            "SELECT r.name, r.format, count(m.step) AS rows, min(m.step) AS first_step, "
            "max(m.step) AS last_step FROM runs r LEFT JOIN metrics m USING (run_id) "
            "GROUP BY ALL ORDER BY r.name"
        )

    def run_config(self, run_id: str) -> dict[str, Any]:
        # fetchall, not fetchone: DuckDB 2.0 keeps a half-read result open and the next
        # query on the connection then fails.
        rows = self.con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchall()
        return json.loads(rows[0][0]) if rows and rows[0][0] else {}

    # ----- per-source rows --------------------------------------------------------------
    def clear_source(self, run_id: str, source: str) -> None:
        """Remove every row a source file contributed, so re-ingesting it adds nothing."""
        for table in PER_SOURCE_TABLES:
            col = "manifest" if table == "batches" else "source"
            self.con.execute(
                f"DELETE FROM {table} WHERE run_id = ? AND {col} = ?", [run_id, source]
            )
        self.con.execute("DELETE FROM sources WHERE run_id = ? AND path = ?", [run_id, source])

    def record_source(
        self, run_id: str, path: str, kind: str, fmt: str, rows: int, warnings: list[str]
    ) -> None:
        size = Path(path).stat().st_size if Path(path).is_file() else None
        now = datetime.now(UTC).replace(tzinfo=None)
        self.con.execute(
            "INSERT OR REPLACE INTO sources VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, path, kind, fmt, size, rows, json.dumps(warnings), now],
        )

    def insert_frame(self, table: str, frame: pl.DataFrame) -> int:
        """Bulk insert through Arrow (no per-row Python); columns are matched by name."""
        if frame.height == 0:
            return 0
        arrow = frame.to_arrow()  # noqa: F841 - referenced by name in the SQL below
        cols = ", ".join(f'"{c}"' for c in frame.columns)
        self.con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM arrow")
        return frame.height

    # ----- reads for later stages -------------------------------------------------------
    def metrics_long(self, run_id: str, metrics: list[str] | None = None) -> pl.DataFrame:
        sql = "SELECT step, metric, value, wall_time FROM metrics WHERE run_id = ?"
        params: list[Any] = [run_id]
        if metrics:
            sql += f" AND metric IN ({', '.join('?' for _ in metrics)})"
            params += metrics
        return self.query(sql + " ORDER BY step", params)

    def metrics_frame(self, run_id: str) -> pl.DataFrame:
        """The run's wide frame (step, wall_time, one column per canonical metric), by step.

        Columns that the run never logged are dropped so callers can test `in frame.columns`.
        """
        df = self.query(
            "SELECT * EXCLUDE (run_id) FROM metrics_wide WHERE run_id = ? ORDER BY step", [run_id]
        )
        keep = [c for c in df.columns if c in ("step", "wall_time") or df[c].null_count() < len(df)]
        return df.select(keep)

    def query(self, sql: str, params: list[Any] | None = None) -> pl.DataFrame:
        """Run a query and return a polars frame (through Arrow, no per-row Python)."""
        table = self.con.sql(sql, params=params or None).to_arrow_table()
        return pl.DataFrame(pl.from_arrow(table))

    table = query  # older name, kept for callers


def open_store(path: Path | str, *, read_only: bool = False) -> Store:
    return Store(path, read_only=read_only)
