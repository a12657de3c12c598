"""Wide metric tables (one row per logged record, one column per metric) to long form.

JSONL, CSV/TSV/Parquet, W&B history exports and Lightning's `metrics.csv` all arrive as
a wide table; this module holds the one set of rules they share, so the formats cannot
drift apart:

* Step column: the first of `STEP_KEYS` present. `trainer/global_step` (Lightning),
  `train/global_step` (the Hugging Face Trainer) and `global_step` beat `step`, because
  W&B's `_step` and Lightning's per-call counters are log-call counters, not optimizer
  steps; `step` beats `iteration`/`iter` because litgpt-style logs
  count micro-iterations there. ms-swift's `global_step/max_steps` holds the global step
  as text `"N/M"` (step N of M); a step printed so anywhere is N. LLaMA-Factory's
  `trainer_log.jsonl` counts optimizer steps in `current_steps`. Every step key is
  bookkeeping, never a metric. A record without the chosen step is skipped with a warning;
  a non-integer step is an error.
  A table with no step key but an epoch counter (`EPOCH_KEYS`: Keras' CSVLogger, per-epoch
  JSONL) has its records numbered 1, 2, ... in file order, with a warning, as the generic
  text reader does for a log without a step counter; the epoch stays a metric.
* Wall time: the first of `WALL_TIME_KEYS` whose values look like a clock (epoch seconds,
  milliseconds, microseconds or nanoseconds, or ISO-8601 text). A `time` column holding
  durations (0.3 s per step) stays a metric.
* Columns starting with '_' are logger bookkeeping (W&B `_runtime`, `_timestamp`,
  `_wandb`, pandas' `__index_level_0__`), as are unnamed index columns.
* Values: numbers as float64, booleans as 0/1, text that spells a number (`"nan"`,
  `"inf"`, `"1.5"`) as that number; other text, lists and empty cells are no data.
  NaN and ±Inf are kept: they are the evidence.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from forensics.errors import InputError
from forensics.lazy import lazy_module
from forensics.store.blocks import MetricBlock, block_from_columns, block_to_long

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars")

STEP_KEYS: tuple[str, ...] = (
    "trainer/global_step",
    "train/global_step",  # the HF Trainer's W&B history (its `_step` counts log calls)
    "global_step",
    "global_step/max_steps",  # ms-swift's logging.jsonl: "12/94"
    "current_steps",  # LLaMA-Factory's trainer_log.jsonl
    "step",
    "iteration",
    "iter",
    "_step",
)
EPOCH_KEYS: tuple[str, ...] = ("epoch", "Epoch")
WALL_TIME_KEYS: tuple[str, ...] = ("wall_time", "_timestamp", "timestamp", "time")
_INDEX_COLUMNS = frozenset({"", "index", "Unnamed: 0"})
_EPOCH_MIN_S = 1e8  # 1973: smaller "times" are durations, not clock readings


# A step printed with its total, `N/M`: the step is N.
COUNTER_TEXT = r"^\s*(\d+)\s*/\s*\d+\s*$"


def pick_step_key(columns: list[str]) -> str | None:
    """The first of STEP_KEYS present; else a column named `Step` in another case (a W&B
    chart export's `Step`, a Hugging Face notebook table's `Step` saved as CSV)."""
    present = set(columns)
    exact = next((k for k in STEP_KEYS if k in present), None)
    if exact is not None:
        return exact
    return next((c for c in columns if _named_step(c)), None)


def _named_step(column: str) -> bool:
    """`Step`, ` STEP`: the step column whatever its case (W&B's chart export)."""
    return column.strip().lower() == "step"


def epoch_key(columns: list[str]) -> str | None:
    """The epoch counter of a table that has no step key (its records get numbered)."""
    if pick_step_key(columns) is not None:
        return None
    present = set(columns)
    return next((k for k in EPOCH_KEYS if k in present), None)


def to_float(col: pl.Series) -> pl.Series | None:
    """The column as float64 values (see the module rules), or None when it holds no number."""
    dtype = col.dtype
    if dtype == pl.Boolean or dtype.is_numeric():
        out = col.cast(pl.Float64)
    elif dtype == pl.String:
        out = col.str.strip_chars().cast(pl.Float64, strict=False)
    else:
        return None
    return out if out.null_count() < len(out) else None


def _epoch_seconds(col: pl.Series) -> pl.Series | None:
    """Seconds since the epoch when `col` looks like a clock, else None."""
    if isinstance(col.dtype, pl.Datetime):  # a Parquet timestamp column
        return col.dt.epoch("us").cast(pl.Float64) / 1e6
    if col.dtype == pl.String:
        num = to_float(col)
        if num is None:
            parsed = col.str.strip_chars().str.to_datetime(strict=False, time_zone="UTC")
            if parsed.null_count() == len(parsed):
                return None
            return parsed.dt.epoch("us").cast(pl.Float64) / 1e6
        col = num
    elif not col.dtype.is_numeric():
        return None
    col = col.cast(pl.Float64)
    scale = clock_scale(col)
    # times the reciprocal (what polars does for `col / scale`), as the SQL path does too
    return None if scale is None else col * (1.0 / scale)


def clock_scale(col: pl.Series) -> float | None:
    """Units per second of a numeric clock column (1, 1e3, 1e6, 1e9), judged by its first
    finite value; None when that value is too small to be a clock reading (a duration)."""
    finite = col.filter(col.is_finite())
    if finite.is_empty():
        return None
    return first_value_scale(float(finite[0]))


def first_value_scale(first: float) -> float | None:
    """`clock_scale` given the column's first finite value (the SQL path finds it in SQL)."""
    first = abs(first)
    if first < _EPOCH_MIN_S:
        return None
    return 1.0 if first < 1e11 else 1e3 if first < 1e14 else 1e6 if first < 1e17 else 1e9


def wall_time_column(wide: pl.DataFrame) -> tuple[str | None, pl.Series | None]:
    for key in WALL_TIME_KEYS:
        if key in wide.columns:
            seconds = _epoch_seconds(wide[key])
            if seconds is not None:
                return key, seconds
    return None, None


def steps_column(wide: pl.DataFrame, key: str, path: Path, first_line: int | None) -> pl.Series:
    """The step column as Int64 (nulls where a record has no step); errors name the line."""
    raw = wide[key]
    if raw.dtype.is_integer():
        return raw.cast(pl.Int64)
    if raw.dtype == pl.String:  # `"12/94"` -> 12; other text is judged below
        raw = raw.str.extract(COUNTER_TEXT, 1).fill_null(raw)
    values = to_float(raw) if raw.dtype != pl.Boolean else None
    if values is None:
        raise InputError(path, "no numeric step", field=key, expected="integer steps")
    bad = (values.is_not_null() & (~values.is_finite() | (values != values.round(0)))).arg_true()
    if bad.len():
        row = int(bad[0])
        line = first_line + row if first_line is not None else None
        raise InputError(
            path, f"step {raw[row]!r} is not an integer", line=line, field=key,
            expected="integer steps",
        )  # fmt: skip
    return values.cast(pl.Int64)


def metric_columns(columns: list[str], exclude: set[str]) -> list[str]:
    """Columns that may hold metrics: everything but step/wall keys, '_' and index columns."""
    return [
        c
        for c in columns
        if c not in exclude
        and c not in STEP_KEYS
        and not _named_step(c)
        and c not in _INDEX_COLUMNS
        and not c.startswith("_")
    ]


def wide_to_long(
    wide: pl.DataFrame, path: Path, *, first_line: int | None = None
) -> tuple[pl.DataFrame, list[str]]:
    """Long-form metrics (step, raw_name, value, wall_time) and warnings from a wide table.

    `first_line` is the file line of row 0 (rows on consecutive lines), so that errors can
    name a line; None where rows and lines do not correspond.
    """
    block, warnings = wide_to_block(wide, path, first_line=first_line)
    return block_to_long(block), warnings


def wide_to_block(
    wide: pl.DataFrame, path: Path, *, first_line: int | None = None
) -> tuple[MetricBlock, list[str]]:
    """The wide table as one metric block (columns renamed, values not copied) and warnings.

    Records without a step are dropped (with a warning); a column with no number in it is
    not a metric. `first_line` as for `wide_to_long`.
    """
    key = pick_step_key(wide.columns)
    numbered = []
    if key is None and (epoch := epoch_key(wide.columns)) is not None:
        steps = pl.int_range(1, wide.height + 1, dtype=pl.Int64, eager=True)
        numbered = [
            f"no step column: the {wide.height} records are numbered 1, 2, ... in file order "
            f"(the step axis is the record's rank, not the optimizer step); '{epoch}' is kept "
            "as a metric"
        ]
    elif key is None:
        raise InputError(
            path, "no step column", expected=f"one of {', '.join(STEP_KEYS)} (or an epoch)"
        )
    else:
        steps = steps_column(wide, key, path, first_line)
    wall_key, wall = wall_time_column(wide)
    names, values = [], []
    for name in metric_columns(wide.columns, {wall_key} if wall_key else set()):
        numbers = to_float(wide[name])
        if numbers is not None:
            names.append(name)
            values.append(numbers)
    block = block_from_columns(steps, wall, values, names)
    missing = steps.null_count()
    if not missing:
        return block, numbered
    assert isinstance(block.frame, pl.DataFrame)
    block.frame = block.frame.filter(pl.col("step").is_not_null())
    return block, [f"{missing} records without a '{key}' value were skipped"]
