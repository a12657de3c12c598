"""TensorFlow's `global_step/sec: 2.1272`: the training rate in steps per second.

TF1's StepCounterHook (an Estimator's, a MonitoredTrainingSession's) logs the rate over the
steps since its last report on a line of its own, with no step, right before the
LoggingTensorHook's `loss = 4.26, step = 100 (124.394 sec)` of the same `session.run`
(100 steps / 0.803899 steps/sec = 124.39 sec, the time that line prints). Read as a line of
its own it had no step and was ignored, so the run's throughput was lost; its name, with
its `/`, is no metric's. It is stored as `steps_per_sec` at the step of the record after
it; one after the last record (a log cut there) measured a step the log does not print and
is not stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forensics.ingest.readers._text import NUMBER, parse_timestamp
from forensics.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:  # the generic reader is imported by every ingest; polars loads when it runs
    pl = lazy_module("polars")

STEP_RATE = rf"\bglobal_step/sec:\s*({NUMBER})\s*$"
NAME = "steps_per_sec"


def step_rate_rows(
    rates: pl.DataFrame, records: pl.DataFrame, rows: pl.DataFrame, notes: list[str]
) -> pl.DataFrame:
    """`rows` (line, step, raw_name, value, wall_time) with a `steps_per_sec` row for each
    rate line of `rates` (line, text) at the step of the next of `records` (line, step).
    Of several rate lines before one record, the last (nearest) is the record's."""
    if rates.height == 0 or records.height == 0:
        return rows
    hit = (
        rates.select(
            "line",
            pl.col("text").str.extract(STEP_RATE, 1).cast(pl.Float64, strict=False).alias("value"),
            parse_timestamp(pl.col("text")).alias("wall_time"),
        )
        .join_asof(records.sort("line"), on="line", strategy="forward")
        .filter(pl.col("step").is_not_null() & pl.col("value").is_not_null())
        .unique(subset=["step"], keep="last", maintain_order=True)
    )
    if hit.height == 0:
        return rows
    notes.append(
        f"generic reader: {hit.height} TensorFlow `global_step/sec` lines stored as "
        f"`{NAME}` (training steps per second) at the step of the record after each, of "
        f"{rates.height} in the log"
    )
    new = hit.select("line", "step", pl.lit(NAME).alias("raw_name"), "value", "wall_time")
    return pl.concat([rows, new.select(rows.columns)], how="vertical_relaxed").sort(
        "line", maintain_order=True
    )
