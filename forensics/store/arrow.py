"""DuckDB <-> polars through the Arrow C stream interface, without pyarrow.

Both libraries speak Arrow's PyCapsule protocol (`__arrow_c_stream__`), so a relation
becomes a polars frame, and a polars frame a table DuckDB scans, with no pyarrow object in
between. Why it matters: DuckDB's own `.arrow()`/`.pl()` and its scan of a polars frame go
through pyarrow, whose import (with numpy's) is ~0.2 s of every command that touches the
store, a third of the fixed cost of `forensics ingest` (bench/ingest_jsonl.py). Older
releases without the protocol fall back to pyarrow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import duckdb
    import polars as pl
else:
    pl = lazy_module("polars")


def to_polars(rel: duckdb.DuckDBPyRelation) -> pl.DataFrame:
    """The relation's rows as a polars frame (the types of `pl.from_arrow(rel.arrow())`)."""
    if hasattr(rel, "__arrow_c_stream__"):
        # Through the bare protocol: given the relation itself, polars also inspects its
        # DuckDB types and keeps them alive, and DuckDB reports them leaked at exit.
        return pl.DataFrame(_Stream(rel))
    return pl.DataFrame(pl.from_arrow(rel.to_arrow_table()))


class _Stream:
    """Only the Arrow stream of a polars frame or a DuckDB relation: what each library
    sees of the other's objects (given the object itself, DuckDB converts a polars frame
    through pyarrow). Each `__arrow_c_stream__` call starts a new stream, so a registered
    frame can be scanned more than once."""

    def __init__(self, source: Any) -> None:
        self._source = source

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self._source.__arrow_c_stream__(requested_schema)


def scannable(frame: pl.DataFrame) -> Any:
    """What to name in DuckDB SQL (a replacement scan) or `register` for a polars frame.

    A column of polars' Null type (every value None, e.g. a frame built from rows whose
    field is always None) goes through pyarrow: its Arrow stream has a null count but no
    validity bitmap, which is valid Arrow that DuckDB's stream import rejects."""
    if hasattr(frame, "__arrow_c_stream__") and not any(map(_holds_null_type, frame.dtypes)):
        return _Stream(frame)
    return frame.to_arrow()


def _holds_null_type(dtype: Any) -> bool:
    if dtype == pl.Null:
        return True
    inner = getattr(dtype, "inner", None)
    fields = getattr(dtype, "fields", None) or []
    return (inner is not None and _holds_null_type(inner)) or any(
        _holds_null_type(f.dtype) for f in fields
    )
