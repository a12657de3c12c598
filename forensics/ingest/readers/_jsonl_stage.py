"""The vectorised JSONL path: DuckDB reads the whole log into a temp table, once.

DuckDB's `read_json` types each column from a sample of the first 20,480 lines. Read with
those auto-detected types it rejects any key the sample did not see ("unknown key"), so a
read that succeeds holds every key in the file. Sampled DOUBLE and VARCHAR columns cannot
lose a value further down. A column sampled as integers, booleans or all-null can: a later
1.5 becomes 2, a later number in an all-null column NULL. Those columns alone are read once
more as DOUBLE to prove no value of theirs was changed. The step column is the exception:
steps are integers, so one sampled as integers is trusted (see `stage`). When a value was
changed, or a column holds dates (we read clock text ourselves), the file is read again
with explicit types (DOUBLE for numbers, VARCHAR for text); when DuckDB declines the
auto-detected read (a key past the sample, a value its sampled type cannot hold), the
explicit read follows a scan that lists every key. Nested records, mixed-type columns and
keys DuckDB would fold together ("Loss" and "loss") get None: the exact Python path takes
those.

On the store's connection the staged table then goes to the store without leaving DuckDB
(`sql_block`); elsewhere it is fetched as a polars frame (`staged_wide`).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import TYPE_CHECKING

from forensics.errors import InputError
from forensics.ingest.readers._wide import (
    WALL_TIME_KEYS,
    clock_scale,
    first_value_scale,
    metric_columns,
    pick_step_key,
    steps_column,
    to_float,
    wall_time_column,
)
from forensics.lazy import lazy_module
from forensics.store.arrow import to_polars
from forensics.store.blocks import MetricBlock, value_column

if TYPE_CHECKING:
    import duckdb
    import polars as pl
else:
    duckdb = lazy_module("duckdb")
    pl = lazy_module("polars")

# DuckDB's sampled type → how we treat the column.
_KEPT = ("DOUBLE", "VARCHAR")
_NARROW_INTS = (
    "BIGINT", "UBIGINT", "INTEGER", "UINTEGER", "SMALLINT", "USMALLINT", "TINYINT",
    "UTINYINT", "HUGEINT", "UHUGEINT",
)  # fmt: skip
_NULL_TYPES = ('"NULL"', "NULL")
_NARROW = (*_NARROW_INTS, "BOOLEAN", *_NULL_TYPES)
_TEXT_TYPES = ("VARCHAR", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "DATE", "TIME", "UUID")
_NUMERIC_TYPES = (*_NARROW_INTS, "DOUBLE", "FLOAT", "BOOLEAN")
_RENAMED = re.compile(r"(.+)_\d+")  # DuckDB's rename of a key that folds onto another
_NESTED_TEXT = r"^\s*[\[{]"  # an object or list that DuckDB turned into text
_TABLE_IDS = itertools.count()


def stage(con: duckdb.DuckDBPyConnection, src: Path) -> str | None:
    """Load `src` into a new temp table on `con` with every key and exact values; its name,
    or None when only the exact path will do. The caller drops it (`drop`)."""
    table = f"_forensics_jsonl_{next(_TABLE_IDS)}"
    path = sql_str(str(src))
    try:
        con.execute(
            f"CREATE TEMP TABLE {table} AS "
            f"SELECT * FROM read_json({path}, format='newline_delimited')"
        )
    except duckdb.Error:
        return _stage_typed(con, path, table, _column_types(con, path))
    types = column_types(con, table)
    if any(t not in _KEPT and t not in _NARROW and t not in _TEXT_TYPES for t in types.values()):
        drop(con, table)
        return None  # nested or mixed: the exact path
    if _folded(list(types)):
        drop(con, table)
        return _stage_typed(con, path, table, _column_types(con, path))
    narrow = {k: t for k, t in types.items() if t in _NARROW}
    step_key = pick_step_key(list(types))
    if step_key is not None and types[step_key] in _NARROW_INTS:
        # Not re-read: steps are integers, and proving it past the sample costs a second
        # read of the file (+40% on the 1M-line benchmark). A fractional step after line
        # 20,480 in a column of integer steps is rounded; earlier ones are InputErrors.
        del narrow[step_key]
    dates = any(t in _TEXT_TYPES and t != "VARCHAR" for t in types.values())
    if not dates and (not narrow or _narrow_values_kept(con, path, narrow)):
        return table
    drop(con, table)
    explicit = {k: "VARCHAR" if t in _TEXT_TYPES else "DOUBLE" for k, t in types.items()}
    return _stage_typed(con, path, table, explicit)


def drop(con: duckdb.DuckDBPyConnection, table: str) -> None:
    con.execute(f"DROP TABLE IF EXISTS {table}")


def column_types(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    rel = con.table(table)
    return {name: str(kind) for name, kind in zip(rel.columns, rel.types, strict=True)}


def staged_wide(con: duckdb.DuckDBPyConnection, table: str) -> pl.DataFrame | None:
    """The staged table as a polars frame, or None when the exact path must judge it."""
    wide = to_polars(con.table(table))
    for name in wide.columns:
        if wide[name].dtype == pl.String and wide[name].str.contains(_NESTED_TEXT).any():
            return None
    step_key = pick_step_key(wide.columns)
    if step_key is None or wide[step_key].null_count():
        return None  # records without a step (or not objects): the exact path names them
    return wide


def sql_block(con: duckdb.DuckDBPyConnection, table: str, path: Path) -> MetricBlock | None:
    """The staged table as a block that is a relation on `con` (so it never leaves DuckDB),
    when the `_wide` rules reduce to SQL: numeric step and wall time, numeric metrics.
    None when polars must apply them (text numbers, ISO clocks, records without a step)."""
    types = column_types(con, table)
    key = pick_step_key(list(types))
    if key is None or types[key] not in _NUMERIC_TYPES:
        return None
    heads = _sql_heads(con, table, types, key)
    if heads is None:
        heads = _polars_heads(con, table, types, key, path)
        if heads is None:
            return None
    rising, wall_key, wall = heads
    names = []
    for name in metric_columns(list(types), {wall_key} if wall_key else set()):
        if types[name] in _NUMERIC_TYPES:
            names.append(name)
        elif not _no_numbers(_fetch(con, table, [name])[name]):
            return None  # numbers written as text, or a nested value: polars decides
    values = [f"{ident(n)}::DOUBLE AS {value_column(i)}" for i, n in enumerate(names)]
    sql = ", ".join([f"{ident(key)}::BIGINT AS step", f"{wall} AS wall_time", *values])
    return MetricBlock(con.sql(f"SELECT {sql} FROM {table}"), names, rising)


# How a staged block's step and wall time are judged: (steps rise in file order, the wall
# time key or None, the SQL of wall_time in seconds).
_Heads = tuple[bool, str | None, str]
# Step types judged in SQL: those a BIGINT holds; others (BOOLEAN, UBIGINT, HUGEINT) go
# through `_polars_heads`, which applies `steps_column` itself.
_SQL_STEP_TYPES = ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UINTEGER", "USMALLINT",
                   "UTINYINT", "DOUBLE", "FLOAT")  # fmt: skip
_SQL_CLOCK_TYPES = (*_NARROW_INTS, "DOUBLE", "FLOAT")  # polars' numeric, not BOOLEAN


def _sql_heads(
    con: duckdb.DuckDBPyConnection, table: str, types: dict[str, str], key: str
) -> _Heads | None:
    """The `_wide` rules for step and wall time, applied in SQL so that a plain numeric
    log reaches the store without importing polars (~0.2 s of a whole-process ingest).
    None when SQL does not settle it (null or fractional steps, a text or boolean clock
    column): `_polars_heads` applies the rules themselves, as before."""
    if types[key] not in _SQL_STEP_TYPES or "rowid" in (k.lower() for k in types):
        return None  # a `rowid` key would hide the table's own row numbers (file order)
    col = ident(key)
    integral = "TRUE"
    if types[key] in ("DOUBLE", "FLOAT"):
        integral = f"isfinite({col}) AND {col} = round({col})"
    nulls, fractional, back = _step_counts(con, table, col, integral)
    if nulls or fractional:
        return None
    for wall_key in (k for k in WALL_TIME_KEYS if k in types and k != key):
        if types[wall_key] not in _SQL_CLOCK_TYPES:
            return None  # text, boolean or a date: polars reads such clocks
        clock = f"{ident(wall_key)}::DOUBLE"
        first = con.execute(
            f"SELECT {clock} FROM {table} WHERE isfinite({clock}) ORDER BY rowid LIMIT 1"
        ).fetchall()
        scale = first_value_scale(first[0][0]) if first else None
        if scale is not None:  # the rounding `_wide` uses: times the reciprocal
            return not back, wall_key, f"{ident(wall_key)}::DOUBLE * {1.0 / scale!r}"
    return not back, None, "NULL::DOUBLE"


def _step_counts(
    con: duckdb.DuckDBPyConnection, table: str, col: str, integral: str
) -> tuple[int, int, int]:
    """Null steps, fractional steps, and steps not above the one before (in file order).

    File order is the staged table's rowid (CREATE TABLE AS keeps insertion order). `lag()
    OVER ()` reads the rows as the scan yields them, in one thread (DuckDB's streaming
    window), 4x faster on a 1M-line log than a window ORDER BY rowid, which sorts; the
    rowids it sees prove that order, and when they do not follow each other the steps are
    judged again by the sorted window."""
    counts = (
        f"SELECT count(*) FILTER (WHERE {col} IS NULL), "
        f"count(*) FILTER (WHERE {col} IS NOT NULL AND NOT ({integral})), "
        f"count(*) FILTER (WHERE {col} <= prev), count(*) FILTER (WHERE rowid <> prev_row + 1) "
    )
    over = "OVER ()"
    for _ in range(2):
        nulls, fractional, back, unordered = con.execute(
            f"{counts} FROM (SELECT {col}, rowid, lag({col}) {over} AS prev, "
            f"lag(rowid) {over} AS prev_row FROM {table})"
        ).fetchall()[0]
        if not unordered:
            break
        over = "OVER (ORDER BY rowid)"
    return int(nulls), int(fractional), int(back)


def _polars_heads(
    con: duckdb.DuckDBPyConnection, table: str, types: dict[str, str], key: str, path: Path
) -> _Heads | None:
    """`_sql_heads` by the `_wide` functions themselves; None: not a SQL block."""
    heads = [key] + [k for k in types if k in WALL_TIME_KEYS and k != key]
    head = _fetch(con, table, heads)
    if head[key].null_count():
        return None
    try:
        steps = steps_column(head, key, path, None)  # raises on a fractional step
    except InputError:
        return None
    wall_key, _ = wall_time_column(head)
    wall = "NULL::DOUBLE"
    if wall_key is not None:
        if types[wall_key] not in _NUMERIC_TYPES:
            return None
        scale = clock_scale(head[wall_key].cast(pl.Float64))
        assert scale is not None  # wall_time_column chose it as a clock
        wall = f"{ident(wall_key)}::DOUBLE * {1.0 / scale!r}"  # the rounding `_wide` uses
    return bool((steps.diff().drop_nulls() > 0).all()), wall_key, wall


def _fetch(con: duckdb.DuckDBPyConnection, table: str, names: list[str]) -> pl.DataFrame:
    cols = ", ".join(ident(n) for n in names)
    return to_polars(con.sql(f"SELECT {cols} FROM {table}"))


def _no_numbers(text: pl.Series) -> bool:
    """A text column that `_wide` would skip: no value spells a number, none is nested."""
    return to_float(text) is None and not text.str.contains(_NESTED_TEXT).any()


def _folded(names: list[str]) -> bool:
    """Keys DuckDB folded together: names equal but for case, or its `name_1` renames."""
    lower = [n.lower() for n in names]
    if len(set(lower)) < len(lower):
        return True
    return any(
        (m := _RENAMED.fullmatch(n)) is not None and m.group(1).lower() in lower for n in names
    )


def _narrow_values_kept(con: duckdb.DuckDBPyConnection, path: str, narrow: dict[str, str]) -> bool:
    """Read the narrow columns again as DOUBLE: did their sampled type keep every value?"""
    columns = "{" + ", ".join(f"{sql_str(k)}: 'DOUBLE'" for k in narrow) + "}"
    changed = " OR ".join(_changed(ident(k), t) for k, t in narrow.items())
    try:
        rows = con.execute(
            f"SELECT count(*) FROM read_json({path}, format='newline_delimited', "
            f"columns={columns}) WHERE {changed}"
        ).fetchall()
    except duckdb.Error:
        return False
    return rows[0][0] == 0


def _changed(col: str, sampled: str) -> str:
    """SQL: the DOUBLE `col` holds a value the sampled type would have altered."""
    if sampled in _NULL_TYPES:
        return f"{col} IS NOT NULL"
    if sampled == "BOOLEAN":
        return f"{col} NOT IN (0, 1)"
    return f"{col} <> round({col})"


def _stage_typed(
    con: duckdb.DuckDBPyConnection, path: str, table: str, types: dict[str, str] | None
) -> str | None:
    if types is None:
        return None
    columns = "{" + ", ".join(f"{sql_str(k)}: '{t}'" for k, t in types.items()) + "}"
    try:
        con.execute(
            f"CREATE TEMP TABLE {table} AS SELECT * FROM "
            f"read_json({path}, format='newline_delimited', columns={columns})"
        )
    except duckdb.Error:
        drop(con, table)
        return None
    return table


def _column_types(con: duckdb.DuckDBPyConnection, path: str) -> dict[str, str] | None:
    """Every key of every line (one scan), typed from DuckDB's sample where it saw the key.

    None when the records are nested, or hold names DuckDB would fold together ("Loss"
    and "loss"): the exact path handles those.
    """
    try:
        found = con.sql(f"SELECT DISTINCT unnest(json_keys(json)) FROM read_ndjson_objects({path})")
        keys = {r[0] for r in found.fetchall()}
        describe = f"DESCRIBE SELECT * FROM read_json({path}, format='newline_delimited')"
        sampled = {r[0]: r[1] for r in con.sql(describe).fetchall()}
    except duckdb.Error:
        return None
    if not keys or len({k.lower() for k in keys}) < len(keys):
        return None
    ordered = [k for k in sampled if k in keys] + sorted(keys - sampled.keys())
    types: dict[str, str] = {}
    for key in ordered:
        kind = sampled.get(key, "DOUBLE")
        if kind in _TEXT_TYPES:
            types[key] = "VARCHAR"
        elif kind in _NUMERIC_TYPES or kind in _NULL_TYPES:
            types[key] = "DOUBLE"
        else:
            return None
    return types


def sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
