"""Metric blocks: the unit in which metric values are written to the store.

A block is a set of series logged on the same rows: one row per logged record with its
`step` (Int64, never null) and `wall_time` (Float64, null when the log has no clock), then
one Float64 value column per series, named `v0`, `v1`, ... in the order of `names` (the raw
metric names). A null value means that series has nothing at that row. NaN and ±Inf are
values, never nulls.

Why blocks and not long rows: a 1M-step x 8-metric log is 8M (step, metric, value) rows,
and writing those with their names as text costs DuckDB three times what reading the log
does. A block stores each record's step and wall time once and its values side by side,
which is what the log itself looked like. See docs/schema.md (`metrics`).

`frame` is a polars DataFrame, or a DuckDB relation on the store's own connection (a table
a reader staged there, so a big log never leaves DuckDB on its way in).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import duckdb
    import polars as pl
else:
    duckdb = lazy_module("duckdb")
    pl = lazy_module("polars")


def long_schema() -> dict[str, Any]:
    """Schema of long metric rows (a function: a module constant would import polars)."""
    return {"step": pl.Int64, "raw_name": pl.Utf8, "value": pl.Float64, "wall_time": pl.Float64}


def value_column(i: int) -> str:
    """Name of the i-th value column of a block frame."""
    return f"v{i}"


@dataclass
class MetricBlock:
    """Series sharing their rows: `step`, `wall_time`, then `v0..` (one per raw name in `names`)."""

    frame: pl.DataFrame | duckdb.DuckDBPyRelation
    names: list[str]
    # True when the reader already knows that `step` strictly increases (no series can
    # repeat a step), which spares a scan of a staged table; None when unknown.
    rising: bool | None = None

    def polars(self) -> pl.DataFrame:
        """The block as a polars frame (a staged relation is fetched through Arrow)."""
        if isinstance(self.frame, pl.DataFrame):
            return self.frame
        from forensics.store.arrow import to_polars

        return to_polars(self.frame)


def block_from_columns(
    step: pl.Series, wall_time: pl.Series | None, values: Sequence[pl.Series], names: list[str]
) -> MetricBlock:
    """A block from its columns; the value series are renamed, not copied."""
    if wall_time is None:
        wall_time = pl.repeat(None, len(step), dtype=pl.Float64, eager=True)
    cols = [step.cast(pl.Int64).alias("step"), wall_time.cast(pl.Float64).alias("wall_time")]
    cols += [v.cast(pl.Float64).alias(value_column(i)) for i, v in enumerate(values)]
    return MetricBlock(pl.DataFrame(cols), list(names))


def block_to_long(block: MetricBlock) -> pl.DataFrame:
    """Long rows (step, raw_name, value, wall_time): series after series, nulls dropped.

    The order is that of the wide-to-long readers before blocks existed, so tests and
    callers of `ReadResult.metrics` see the same frame.
    """
    frame = block.polars()
    if not block.names:
        return pl.DataFrame(schema=long_schema())
    # One unpivot, not one select per series: a select on a 10,000-column frame costs
    # time in its width, so a select per column was quadratic.
    names = {value_column(i): name for i, name in enumerate(block.names)}
    long = frame.unpivot(
        on=list(names), index=["step", "wall_time"], variable_name="raw_name", value_name="value"
    )
    long = long.with_columns(
        pl.col("raw_name").replace_strict(names, return_dtype=pl.Utf8),
        pl.col("value").cast(pl.Float64),
    ).select("step", "raw_name", "value", "wall_time")
    if long["value"].null_count():
        long = long.filter(pl.col("value").is_not_null())
    return long


if TYPE_CHECKING:
    _Pending = tuple[pl.DataFrame, list[tuple[Any, ...]], list[pl.Series]]


def blocks_from_long(
    long: pl.DataFrame, keys: list[str]
) -> list[tuple[MetricBlock, list[tuple[Any, ...]]]]:
    """Group long rows into blocks: one series per distinct `keys`, series whose (step,
    wall_time) sequences are identical share a block (so the block is dense).

    Returns each block with the key tuple of each of its value columns. `names` of a block
    is the `raw_name` of its series. Rows keep their order within a series, so repeated
    steps (a resumed run) stay as they were.
    """
    if long.height == 0:
        return []
    parts = long.partition_by(keys, maintain_order=True, as_dict=True)
    # (length, first step, last step) -> blocks so far: (step + wall rows, keys, values)
    groups: dict[tuple[Any, ...], list[_Pending]] = {}
    for key, part in parts.items():
        step, wall = part["step"], part["wall_time"]
        coarse = (part.height, step[0], step[-1])
        bucket = groups.setdefault(coarse, [])
        for rows, block_keys, values in bucket:
            if _same(rows["step"], step) and _same(rows["wall_time"], wall):
                block_keys.append(key)
                values.append(part["value"])
                break
        else:
            bucket.append((part.select("step", "wall_time"), [key], [part["value"]]))
    out = []
    name_at = keys.index("raw_name")
    for bucket in groups.values():
        for rows, block_keys, values in bucket:
            names = [str(k[name_at]) for k in block_keys]
            out.append(
                (block_from_columns(rows["step"], rows["wall_time"], values, names), block_keys)
            )
    return out


def _same(a: pl.Series, b: pl.Series) -> bool:
    """Equal element by element, null matching null (NaN wall times just split blocks)."""
    return a.len() == b.len() and bool(a.equals(b, check_names=False, null_equal=True))
