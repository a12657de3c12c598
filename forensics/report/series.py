"""Numbers read off the metric curves: values at a step, baselines, medians.

The detector stores what it measured; the report adds what a reader asks next ("what was
the loss 500 steps later?") straight from `metrics`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from forensics.detect.config import DetectConfig

BASELINE_POINTS = 10  # logged points before onset that define the pre-spike level and noise


@dataclass
class Point:
    step: int
    value: float


def column(frame: pl.DataFrame, metric: str) -> pl.DataFrame:
    """(step, value) of one metric, logged rows only, by step."""
    if metric not in frame.columns:
        return pl.DataFrame(
            {"step": [], "value": []}, schema={"step": pl.Int64, "value": pl.Float64}
        )
    return frame.select("step", pl.col(metric).alias("value")).drop_nulls("value")


# a level is the median the typing's return test reads (detection.md, Types)
LEVEL_POINTS = DetectConfig.smooth_points


@dataclass
class Level:
    """The median of the finite values among the `n` logged from step `first` to `last`."""

    first: int
    last: int
    n: int
    value: float  # NaN when none of them is finite


def level_from(
    frame: pl.DataFrame, metric: str, step: int, points: int = LEVEL_POINTS
) -> Level | None:
    """The level of the curve from `step` on: one logged value is one batch's noise (a
    +15% point among values near the trend would read as a lasting rise)."""
    rows = column(frame, metric).filter(pl.col("step") >= step).head(points)
    if not rows.height:
        return None
    vals = rows.filter(pl.col("value").is_finite())["value"]
    med = float(vals.median()) if vals.len() else float("nan")  # type: ignore[arg-type]
    return Level(int(rows["step"][0]), int(rows["step"][-1]), rows.height, med)


def last_before(frame: pl.DataFrame, metric: str, step: int) -> Point | None:
    rows = column(frame, metric).filter(pl.col("step") < step).tail(1)
    return Point(int(rows["step"][0]), float(rows["value"][0])) if rows.height else None


def peak_between(frame: pl.DataFrame, metric: str, lo: int, hi: int) -> Point | None:
    """The largest finite value in [lo, hi] (NaN and Inf are reported separately)."""
    rows = column(frame, metric).filter(pl.col("step").is_between(lo, hi))
    rows = rows.filter(pl.col("value").is_finite())
    if not rows.height:
        return None
    best = rows.sort(["value", "step"], descending=[True, False]).head(1)
    return Point(int(best["step"][0]), float(best["value"][0]))


def baseline(
    frame: pl.DataFrame, metric: str, before: int, points: int = BASELINE_POINTS
) -> tuple[float, float] | None:
    """Median and median absolute deviation of the last logged points before `before`.

    Few points, so that a curve still falling fast (early training) is not read as higher
    than it was just before the spike.
    """
    rows = column(frame, metric).filter(pl.col("step") < before).tail(points)
    vals = rows.filter(pl.col("value").is_finite())["value"]
    if vals.len() == 0:
        return None
    med = float(vals.median())  # type: ignore[arg-type]
    mad = float((vals - med).abs().median())  # type: ignore[arg-type]
    return med, mad


def first_nonfinite(frame: pl.DataFrame, metric: str, lo: int, hi: int) -> int | None:
    rows = column(frame, metric).filter(
        pl.col("step").is_between(lo, hi) & ~pl.col("value").is_finite()
    )
    return int(rows["step"][0]) if rows.height else None


def median_between(frame: pl.DataFrame, metric: str, lo: int, hi: int) -> float | None:
    vals = column(frame, metric).filter(pl.col("step").is_between(lo, hi))["value"]
    vals = vals.filter(vals.is_finite())
    return float(vals.median()) if vals.len() else None  # type: ignore[arg-type]


def seconds_per_step(frame: pl.DataFrame, before: int) -> float | None:
    """Median wall-clock seconds per step before `before`, from `wall_time` deltas."""
    if "wall_time" not in frame.columns:
        return None
    rows = frame.filter(pl.col("step") < before).select("step", "wall_time").drop_nulls()
    if rows.height < 2:
        return None
    d = rows.with_columns((pl.col("wall_time").diff() / pl.col("step").diff()).alias("rate"))[
        "rate"
    ].drop_nulls()
    d = d.filter(d.is_finite() & (d > 0))
    return float(d.median()) if d.len() else None  # type: ignore[arg-type]


def is_finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
