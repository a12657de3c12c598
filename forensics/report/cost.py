"""What an incident cost: steps, tokens, GPU-hours and dollars, each with its formula.

A number is only given when every factor is known; otherwise the report says which factor
is missing and how to supply it, rather than guessing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forensics.report.fmt import count, num, plural, usd


@dataclass
class Throughput:
    """How fast the run went before the incident, and what it ran on."""

    tokens_per_step: float | None = None
    tokens_per_step_how: str = ""
    seconds_per_step: float | None = None
    seconds_per_step_how: str = ""
    world_size: int | None = None
    world_size_how: str = ""
    gpu_hour_cost: float | None = None


@dataclass
class Cost:
    """One row per quantity: value (or None) and the formula or reason."""

    steps: int | None
    steps_how: str
    tokens: float | None = None
    tokens_how: str = ""
    gpu_hours: float | None = None
    gpu_hours_how: str = ""
    usd: float | None = None
    usd_how: str = ""
    unknown: list[str] = field(default_factory=list)


def tokens_per_step(config: dict[str, Any]) -> tuple[float | None, str]:
    """From the run config: `tokens_per_step`, else `global_batch_size × seq_len`."""
    tps = positive(config.get("tokens_per_step"))
    if tps:
        return tps, "run config `tokens_per_step`"
    gbs, seq = positive(config.get("global_batch_size")), positive(config.get("seq_len"))
    if gbs and seq:
        return gbs * seq, f"global batch {num(gbs)} × sequence length {num(seq)} (run config)"
    return None, ""


def positive(value: Any) -> float | None:
    """`value` as a positive float (configs hold numbers as strings too), else None."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if x > 0 else None


def incident_cost(
    steps: int | None, steps_how: str, tp: Throughput, stored: dict[str, Any]
) -> Cost:
    """Price `steps` lost steps; fall back to the detector's stored numbers when we cannot."""
    cost = Cost(steps, steps_how)
    if steps is None:
        cost.unknown.append("steps lost: the incident's extent is not known")
        return cost
    _tokens(cost, steps, tp, stored.get("tokens_lost"))
    _gpu_hours(cost, steps, tp, stored.get("gpu_hours_lost"))
    _dollars(cost, tp, stored.get("cost_usd"))
    return cost


def _tokens(cost: Cost, steps: int, tp: Throughput, stored: float | None) -> None:
    if tp.tokens_per_step:
        cost.tokens = steps * tp.tokens_per_step
        cost.tokens_how = (
            f"{plural(steps, 'step')} × {num(tp.tokens_per_step)} tokens/step "
            f"({tp.tokens_per_step_how})"
        )
    elif stored is not None:
        cost.tokens, cost.tokens_how = stored, "as stored by the detector"
    else:
        cost.unknown.append(
            "tokens: tokens per step unknown (the run config has neither `tokens_per_step` "
            "nor `global_batch_size` and `seq_len`)"
        )


def _gpu_hours(cost: Cost, steps: int, tp: Throughput, stored: float | None) -> None:
    if tp.seconds_per_step and tp.world_size:
        cost.gpu_hours = steps * tp.seconds_per_step * tp.world_size / 3600
        cost.gpu_hours_how = (
            f"{plural(steps, 'step')} × {num(tp.seconds_per_step)} s/step "
            f"({tp.seconds_per_step_how}) × {num(tp.world_size)} GPUs "
            f"({tp.world_size_how}) ÷ 3600"
        )
        return
    if stored is not None:
        cost.gpu_hours, cost.gpu_hours_how = stored, "as stored by the detector"
        return
    if not tp.seconds_per_step:
        cost.unknown.append(
            "GPU-hours: time per step unknown (no `tokens_per_s` with a known batch size, "
            "no `iter_time_ms`, no wall-clock times in the log)"
        )
    if not tp.world_size:
        cost.unknown.append(
            "GPU-hours: number of GPUs unknown (pass `--world-size N` or log `world_size` "
            "in the run config)"
        )


def _dollars(cost: Cost, tp: Throughput, stored: float | None) -> None:
    if cost.gpu_hours is not None and tp.gpu_hour_cost is not None:
        cost.usd = cost.gpu_hours * tp.gpu_hour_cost
        cost.usd_how = f"{num(cost.gpu_hours)} GPU-hours × {usd(tp.gpu_hour_cost)}/GPU-hour"
    elif stored is not None:
        cost.usd, cost.usd_how = stored, "as stored by the detector"
    elif cost.gpu_hours is not None:
        cost.unknown.append("dollars: price per GPU-hour unknown (pass `--gpu-hour-cost X`)")


def totals(costs: list[Cost]) -> dict[str, Any]:
    """Sums over incidents; a total is given only when every incident's part is known."""

    def add(attr: str) -> float | None:
        vals = [getattr(c, attr) for c in costs]
        return sum(vals) if vals and all(v is not None for v in vals) else None

    return {
        "steps": add("steps"),
        "tokens": add("tokens"),
        "tokens_text": count(add("tokens")),
        "gpu_hours": add("gpu_hours"),
        "usd": add("usd"),
    }
