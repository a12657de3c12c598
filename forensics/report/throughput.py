"""How fast the run went and on how many GPUs: the factors that price an incident.

Seconds per step come from `iter_time_ms`, else wall-clock deltas, else tokens per step ÷
`tokens_per_s` (the order detection uses, so the report and `incidents.gpu_hours_lost`
agree); medians over the whole run, so one slow step does not skew the price.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from forensics.report import series
from forensics.report.cost import Throughput, positive, tokens_per_step
from forensics.report.fmt import num

WHOLE_RUN = (-(2**62), 2**62)


def throughput(
    frame: pl.DataFrame,
    config: dict[str, Any],
    gpu_hour_cost: float | None,
    world_size: int | None,
) -> Throughput:
    """Tokens per step, seconds per step and GPUs, each with where it came from."""
    tp = Throughput(gpu_hour_cost=gpu_hour_cost)
    tp.tokens_per_step, tp.tokens_per_step_how = tokens_per_step(config)
    _seconds_per_step(tp, frame)
    if tp.tokens_per_step is None and tp.seconds_per_step:
        tok_s = series.median_between(frame, "tokens_per_s", *WHOLE_RUN)
        if tok_s:
            tp.tokens_per_step = tok_s * tp.seconds_per_step
            tp.tokens_per_step_how = (
                f"median `tokens_per_s` {num(tok_s)} × {num(tp.seconds_per_step)} s/step"
            )
    if world_size:
        tp.world_size, tp.world_size_how = world_size, "--world-size"
    elif positive(config.get("world_size")):
        tp.world_size, tp.world_size_how = int(config["world_size"]), "run config `world_size`"
    return tp


def _seconds_per_step(tp: Throughput, frame: pl.DataFrame) -> None:
    ms = series.median_between(frame, "iter_time_ms", *WHOLE_RUN)
    if ms:
        tp.seconds_per_step, tp.seconds_per_step_how = ms / 1000, "median `iter_time_ms`"
        return
    wall = series.seconds_per_step(frame, WHOLE_RUN[1])
    if wall:
        tp.seconds_per_step = wall
        tp.seconds_per_step_how = "median wall-clock time per step"
        return
    tok_s = series.median_between(frame, "tokens_per_s", *WHOLE_RUN)
    if tok_s and tp.tokens_per_step:
        tp.seconds_per_step = tp.tokens_per_step / tok_s
        tp.seconds_per_step_how = (
            f"{num(tp.tokens_per_step)} tokens/step ÷ median `tokens_per_s` {num(tok_s)}"
        )
