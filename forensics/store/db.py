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
from typing import TYPE_CHECKING, Any

import duckdb

from forensics.canon import alias_table
from forensics.errors import RunNotFoundError, StoreError
from forensics.lazy import lazy_module
from forensics.store.arrow import scannable, to_polars
from forensics.store.blocks import MetricBlock, blocks_from_long, value_column
from forensics.store.schema import (
    ADDED_COLUMNS,
    PER_SOURCE_TABLES,
    SCHEMA_VERSION,
    create_statements,
    schema_marker,
    wide_view_sql,
)

if TYPE_CHECKING:
    import polars as pl
else:  # a JSONL log's block is a DuckDB relation: storing it needs no polars
    pl = lazy_module("polars")

METRIC_COLUMNS = ["run_id", "step", "metric", "value", "wall_time", "raw_name", "source"]
_BLOCK_VIEW = "_forensics_block"  # temp view over the block being written
_CELLS = "_forensics_cells"  # temp table: a wide block unpivoted, one row per value
_FEW_COLUMNS = 32  # up to this many value columns, pairwise grouping; beyond, by signature


class Store:
    """A DuckDB connection plus the handful of reads and writes the stages share."""

    def __init__(self, path: Path | str, *, read_only: bool = False) -> None:
        self.path = Path(path)
        if read_only and not self.path.exists():
            raise StoreError(f'"{self.path}" does not exist; run `forensics ingest` first')
        _check_database_file(self.path)
        new = not self.path.exists()
        try:
            self.con = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.Error as exc:
            msg = str(exc).splitlines()[0]
            raise StoreError(f'cannot open "{self.path}": {msg}') from exc
        self.con.execute("SET enable_progress_bar = false")  # readers run big scans on it
        if not read_only:
            self._ensure_schema(new)

    def _ensure_schema(self, new: bool) -> None:
        """Create what is missing, migrate what is old; nothing when the store was last
        opened by this very schema (its fingerprint in `meta`), the usual case. A new store
        is made in one batch, with the added columns in its CREATE TABLEs (an ALTER per
        column costs DuckDB a new version of the table: ~10 ms of every first ingest), and
        without listing its tables first (DuckDB's catalog functions cost ~6 ms)."""
        views = wide_view_sql(alias_table().names())
        marker = schema_marker(views)
        if not new and self._meta("schema_ddl") == marker:
            return
        tables = set() if new else self._tables()
        with self.transaction():
            old_metrics = "metrics" in tables  # schema 1 stored long rows in a table
            if old_metrics:
                self.con.execute("DROP VIEW IF EXISTS metrics_wide")
                self.con.execute("ALTER TABLE metrics RENAME TO metrics_v1")
            self.con.execute(";\n".join(create_statements()))
            for table, column, kind in ADDED_COLUMNS if tables else ():  # an older store
                self.con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")
            if old_metrics:
                self._migrate_v1_metrics()
            self.con.execute(views)
            self.con.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?), ('schema_ddl', ?)",
                [str(SCHEMA_VERSION), marker],
            )

    def _tables(self) -> set[str]:
        """The store's own tables (schema main)."""
        rows = self.con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'"
        ).fetchall()
        return {str(r[0]) for r in rows}

    def _meta(self, key: str) -> str | None:
        """A value of table `meta`; None when there is none, or no `meta` (a store from
        before it, or not ours: the caller then looks at its tables)."""
        try:
            rows = self.con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchall()
        except duckdb.Error:  # no such table (DuckDB tried a Python variable named so, too)
            return None
        return str(rows[0][0]) if rows else None

    def _migrate_v1_metrics(self) -> None:
        """Schema 1's long `metrics` rows into blocks, one block per series."""
        self.con.execute(
            "INSERT INTO metric_columns SELECT row_number() OVER (ORDER BY run_id, source, metric, "
            "raw_name), 1, * FROM "
            "(SELECT DISTINCT run_id, source, metric, raw_name FROM metrics_v1)"
        )
        self.con.execute(
            "INSERT INTO metric_rows SELECT c.block_id, m.step, m.wall_time, [m.value] "
            "FROM metrics_v1 m JOIN metric_columns c USING (run_id, source, metric, raw_name) "
            "WHERE m.value IS NOT NULL"
        )
        self.con.execute("DROP TABLE metrics_v1")

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
        """Remove every row a source file contributed, so re-ingesting it adds nothing.
        One query finds the tables holding any (none, for a new source): a DELETE per
        table was a dozen statements on every ingest."""
        tables = [("metric_columns", "source"), ("sources", "path")]
        tables += [("source_fingerprints", "path"), ("conflicts", "source")]
        tables += [(t, "manifest" if t == "batches" else "source") for t in PER_SOURCE_TABLES]
        probe = " UNION ALL ".join(
            f"(SELECT '{table}' FROM {table} WHERE run_id = $run AND {col} = $source LIMIT 1)"
            for table, col in tables
        )
        held = {r[0] for r in self.con.execute(probe, {"run": run_id, "source": source}).fetchall()}
        params = [run_id, source]
        if "metric_columns" in held:
            self.con.execute(
                "DELETE FROM metric_rows WHERE block_id IN (SELECT block_id FROM metric_columns "
                "WHERE run_id = ? AND source = ?)",
                params,
            )
        for table, col in tables:
            if table in held:
                self.con.execute(f"DELETE FROM {table} WHERE run_id = ? AND {col} = ?", params)

    def record_source(
        self,
        run_id: str,
        path: str,
        kind: str,
        fmt: str,
        rows: int,
        warnings: list[str],
        fingerprint: str | None = None,
    ) -> None:
        size = Path(path).stat().st_size if Path(path).is_file() else None
        now = datetime.now(UTC).replace(tzinfo=None)
        self.con.execute(
            "INSERT OR REPLACE INTO sources (run_id, path, kind, format, bytes, rows, warnings, "
            "ingested_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, path, kind, fmt, size, rows, json.dumps(warnings), now],
        )
        if fingerprint is not None:
            self.con.execute(
                "INSERT OR REPLACE INTO source_fingerprints VALUES (?, ?, ?)",
                [run_id, path, fingerprint],
            )

    def add_source_warnings(self, run_id: str, path: str, warnings: list[str]) -> None:
        """Append warnings found after a source was recorded (conflicts with later ones)."""
        rows = self.con.execute(
            "SELECT warnings FROM sources WHERE run_id = ? AND path = ?", [run_id, path]
        ).fetchall()
        if rows:
            old = json.loads(rows[0][0]) if rows[0][0] else []
            self.con.execute(
                "UPDATE sources SET warnings = ? WHERE run_id = ? AND path = ?",
                [json.dumps(old + warnings), run_id, path],
            )

    def source_fingerprints(self, run_id: str) -> dict[str, str]:
        """Fingerprint -> path of the run's stored sources (those recorded with one)."""
        rows = self.con.execute(
            "SELECT fingerprint, path FROM source_fingerprints WHERE run_id = ?",
            [run_id],
        ).fetchall()
        return {str(f): str(p) for f, p in rows}

    def insert_frame(self, table: str, frame: pl.DataFrame) -> int:
        """Bulk insert through Arrow (no per-row Python); columns are matched by name."""
        if table == "metrics":
            raise StoreError("`metrics` is a view: store metric rows with Store.insert_metrics")
        if frame.height == 0:
            return 0
        arrow = scannable(frame)  # noqa: F841 - referenced by name in the SQL below
        cols = ", ".join(f'"{c}"' for c in frame.columns)
        self.con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM arrow")
        return frame.height

    # ----- metric values -----------------------------------------------------------------
    def insert_metrics(self, frame: pl.DataFrame) -> int:
        """Store long metric rows (the columns of `metrics`): the one way values go in.

        Rows are grouped into blocks (series of one run and source logged at the same
        steps); a NULL value means "not logged" and is not stored. Returns the values stored.
        """
        missing = [c for c in METRIC_COLUMNS if c not in frame.columns]
        if missing:
            raise StoreError(f"metric rows lack column(s) {', '.join(missing)}")
        frame = frame.select(METRIC_COLUMNS).filter(pl.col("value").is_not_null())
        stored = 0
        for (run_id, source), part in frame.partition_by(
            ["run_id", "source"], maintain_order=True, as_dict=True
        ).items():
            for block, keys in blocks_from_long(part, ["metric", "raw_name"]):
                stored += self.insert_metric_block(
                    str(run_id), str(source), block, [str(k[0]) for k in keys]
                )
        return stored

    def insert_metric_block(
        self, run_id: str, source: str, block: MetricBlock, metrics: list[str]
    ) -> int:
        """Store one block; `metrics` is the canonical name of each of its value columns.

        Columns with the same null rows are written together, each group as a block of its
        own holding only the rows where it has values, so no stored list holds a null.
        Returns the number of values stored. Cost is linear in rows x columns: a log with
        10,000 sparse metrics is grouped by one signature per column, not pair by pair.
        """
        if len(metrics) != len(block.names):
            raise StoreError(f"{len(block.names)} value columns but {len(metrics)} metric names")
        if not block.names:
            return 0
        frame = block.frame
        if isinstance(frame, duckdb.DuckDBPyRelation):  # a reader's staged table (no polars)
            self.con.execute(f"CREATE OR REPLACE TEMP VIEW {_BLOCK_VIEW} AS {frame.sql_query()}")
        else:
            self.con.register(_BLOCK_VIEW, scannable(frame))
        try:
            if len(block.names) <= _FEW_COLUMNS:
                rows, groups = self._dense_groups(len(block.names))
                for cols, count in groups:
                    self._write_block(run_id, source, block, metrics, cols, count < rows)
                return sum(count * len(cols) for cols, count in groups)
            return self._write_wide_block(run_id, source, block, metrics)
        finally:
            if isinstance(frame, duckdb.DuckDBPyRelation):
                self.con.execute(f"DROP VIEW IF EXISTS {_BLOCK_VIEW}")
            else:
                self.con.unregister(_BLOCK_VIEW)

    def _dense_groups(self, width: int) -> tuple[int, list[tuple[list[int], int]]]:
        """Rows of the block view, and its value columns grouped by their null rows.

        Columns without any value are left out. Counts split the columns first; columns
        with equal counts are compared row by row only against each group's first column.
        Quadratic in the number of columns at worst: used only for narrow blocks
        (_FEW_COLUMNS); wide ones go through `_write_wide_block`.
        """
        rows, *counts = self.con.execute(
            "SELECT count(*), "
            + ", ".join(f"count({value_column(i)})" for i in range(width))
            + f" FROM {_BLOCK_VIEW}"
        ).fetchall()[0]
        if all(count == rows for count in counts):  # no null anywhere: one dense group
            return rows, [(list(range(width)), rows)] if rows else []
        groups: list[tuple[list[int], int]] = []
        for i, count in enumerate(counts):
            if not count:
                continue
            peers = [g for g in groups if g[1] == count]
            if peers:
                differ = self.con.execute(
                    "SELECT "
                    + ", ".join(
                        f"count(*) FILTER (({value_column(i)} IS NULL) <> "
                        f"({value_column(g[0][0])} IS NULL))"
                        for g in peers
                    )
                    + f" FROM {_BLOCK_VIEW}"
                ).fetchall()[0]
                same = next((g for g, d in zip(peers, differ, strict=True) if d == 0), None)
                if same is not None:
                    same[0].append(i)
                    continue
            groups.append(([i], count))
        return rows, groups

    def _write_wide_block(
        self, run_id: str, source: str, block: MetricBlock, metrics: list[str]
    ) -> int:
        """A block with many columns (10,000 sparse metrics, a 10,001-column CSV), linear in
        its values: it is unpivoted once into (row, column, value) cells (DuckDB drops the
        nulls); columns are grouped by a signature of the rows holding them (count and a
        hash of the row numbers), each grouping is then proven exact (a column holding a row
        its group's first lacks is split off: a hash collision), and every group's rows are
        written in one statement, a group's values at one row becoming that row's list."""
        self.con.execute(
            f"CREATE OR REPLACE TEMP TABLE {_CELLS} AS SELECT _rn, step, wall_time, "
            "CAST(substr(col, 2) AS INTEGER) AS col, value FROM (UNPIVOT (SELECT "
            f"row_number() OVER () AS _rn, * FROM {_BLOCK_VIEW}) ON COLUMNS(* EXCLUDE "
            "(_rn, step, wall_time)) INTO NAME col VALUE value)"
        )
        try:
            signed = self.con.execute(
                f"SELECT col, count(*), bit_xor(hash(_rn)) FROM {_CELLS} GROUP BY col ORDER BY col"
            ).fetchall()
            by_signature: dict[tuple[int, int], list[int]] = {}
            for col, count, sig in signed:
                by_signature.setdefault((int(count), int(sig)), []).append(int(col))
            groups = list(by_signature.values())
            groups += self._split_collisions(groups)
            base = self._next_block_id()
            placed = [
                (base + g, slot, i)
                for g, cols in enumerate(groups)
                for slot, i in enumerate(cols, start=1)
            ]
            self.insert_frame(
                "metric_columns", _columns_frame(placed, run_id, source, metrics, block.names)
            )
            slots = pl.DataFrame(  # noqa: F841 - referenced by name in the SQL below
                {
                    "col": [i for _, _, i in placed],
                    "block_id": [b for b, _, _ in placed],
                    "slot": [s for _, s, _ in placed],
                },
                schema={"col": pl.Int32, "block_id": pl.Int32, "slot": pl.Int32},
            )
            slots = scannable(slots)  # noqa: F841
            self.con.execute(
                "INSERT INTO metric_rows SELECT s.block_id, c.step, any_value(c.wall_time), "
                f"list(c.value ORDER BY s.slot) FROM {_CELLS} c JOIN slots s USING (col) "
                "GROUP BY s.block_id, c._rn, c.step"
            )
            return len(placed) and int(
                self.con.execute(f"SELECT count(*) FROM {_CELLS}").fetchall()[0][0]
            )
        finally:
            self.con.execute(f"DROP TABLE IF EXISTS {_CELLS}")

    def _split_collisions(self, groups: list[list[int]]) -> list[list[int]]:
        """Columns whose rows differ from their group's first column (signatures collided):
        removed from `groups` and returned, each as a group of its own."""
        pairs = [(cols[0], i) for cols in groups for i in cols[1:]]
        if not pairs:
            return []
        leaders = pl.DataFrame(  # noqa: F841 - referenced by name in the SQL below
            {"col": [i for _, i in pairs], "leader": [lead for lead, _ in pairs]},
            schema={"col": pl.Int32, "leader": pl.Int32},
        )
        leaders = scannable(leaders)  # noqa: F841
        bad = {
            int(r[0])
            for r in self.con.execute(
                f"SELECT DISTINCT c.col FROM {_CELLS} c JOIN leaders l USING (col) "
                f"ANTI JOIN {_CELLS} f ON f.col = l.leader AND f._rn = c._rn"
            ).fetchall()
        }
        for cols in groups:
            cols[:] = [i for i in cols if i not in bad]
        return [[i] for i in sorted(bad)]

    def _next_block_id(self) -> int:
        (block_id,) = self.con.execute(
            "SELECT coalesce(max(block_id), 0) + 1 FROM metric_columns"
        ).fetchall()[0]
        return int(block_id)

    def _write_block(
        self,
        run_id: str,
        source: str,
        block: MetricBlock,
        metrics: list[str],
        cols: list[int],
        sparse: bool,
    ) -> None:
        block_id = self._next_block_id()
        # a few rows (<= _FEW_COLUMNS): plain parameters, so a relation block needs no polars
        self.con.executemany(
            "INSERT INTO metric_columns (block_id, slot, run_id, source, metric, raw_name) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                [block_id, slot, run_id, source, metrics[i], block.names[i]]
                for slot, i in enumerate(cols, start=1)
            ],
        )
        values = ", ".join(value_column(i) for i in cols)
        where = f"WHERE {value_column(cols[0])} IS NOT NULL" if sparse else ""
        self.con.execute(
            f"INSERT INTO metric_rows SELECT {int(block_id)}, step, wall_time, [{values}] "
            f"FROM {_BLOCK_VIEW} {where}"
        )

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
        return to_polars(self.con.sql(sql, params=params or None))

    table = query  # older name, kept for callers


_DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of every DuckDB database file


def _check_database_file(path: Path) -> None:
    """`--db` must name a DuckDB file or a new path: opening anything else would either
    fail deep in DuckDB or (an old CSV) never persist what was ingested."""
    if not path.exists():
        if path.parent != Path("") and not path.parent.is_dir():
            raise StoreError(f'"{path}": folder "{path.parent}" does not exist')
        return
    if path.is_dir():
        raise StoreError(f'"{path}" is a folder, not a DuckDB database file')
    if not path.is_file():
        raise StoreError(f'"{path}" is not a regular file (expected a DuckDB database file)')
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
    except OSError as exc:
        raise StoreError(f'cannot read "{path}": {exc.strerror}') from exc
    if head and head[8:12] != _DUCKDB_MAGIC:
        raise StoreError(
            f'"{path}" exists and is not a DuckDB database; pass --db a .duckdb file or a new path'
        )


def _columns_frame(
    placed: list[tuple[int, int, int]],
    run_id: str,
    source: str,
    metrics: list[str],
    names: list[str],
) -> pl.DataFrame:
    """metric_columns rows for (block_id, slot, value column index) triples."""
    return pl.DataFrame(
        {
            "block_id": [b for b, _, _ in placed],
            "slot": [s for _, s, _ in placed],
            "run_id": run_id,
            "source": source,
            "metric": [metrics[i] for _, _, i in placed],
            "raw_name": [names[i] for _, _, i in placed],
        },
        schema={
            "block_id": pl.Int32, "slot": pl.Int32, "run_id": pl.Utf8, "source": pl.Utf8,
            "metric": pl.Utf8, "raw_name": pl.Utf8,
        },
    )  # fmt: skip


def open_store(path: Path | str, *, read_only: bool = False) -> Store:
    return Store(path, read_only=read_only)
