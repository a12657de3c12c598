"""What an incident cost: steps, tokens, GPU-hours and dollars, each with its formula.

A number is only given when every factor is known; otherwise the report says which factor
is missing and how to supply it, rather than guessing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forensics.report.fmt import count, gpu_hours, num, plural, usd
from forensics.report.model import Incident


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


def incident_cost(
    inc: Incident,
    world_size: int | None,
    gpu_hour_cost: float | None,
    config: dict[str, Any] | None = None,
) -> Cost:
    """The stored cost with its formula in words. `world_size` / `gpu_hour_cost` (report
    options) only fill a factor detection did not know, and the formula says so; `config`
    (the run's stored config) says which factor of the tokens per step is known."""
    cost = Cost(inc.steps_lost, steps_how(inc))
    if inc.steps_lost is None:
        cost.unknown.append("steps lost: the incident's extent is not known")
        return cost
    steps = int(inc.steps_lost)
    if inc.tokens_lost is not None and inc.tokens_per_step:
        cost.tokens = inc.tokens_lost
        cost.tokens_how = f"{plural(steps, 'step')} × {num(inc.tokens_per_step)} tokens/step"
    elif inc.tokens_lost is not None:
        cost.tokens, cost.tokens_how = inc.tokens_lost, "as stored by detect"
    else:
        cost.unknown.append(tokens_unknown(config or {}))
    _gpu_hours(cost, inc, world_size)
    _dollars(cost, inc, gpu_hour_cost)
    return cost


def tokens_unknown(cfg: dict[str, Any]) -> str:
    """Why tokens per step are unknown, naming the factors the stored config does give."""
    gbs, micro = cfg.get("global_batch_size"), cfg.get("per_device_train_batch_size")
    accum, world_from = cfg.get("gradient_accumulation_steps") or 1, cfg.get("world_size_from")
    if gbs and not cfg.get("seq_len"):
        how = (
            f" = per_device_train_batch_size {micro} × gradient_accumulation_steps {accum} × "
            f"world size {cfg.get('world_size')} from {world_from}"
            if micro and world_from and cfg.get("world_size")
            else ""
        )
        return (
            f"tokens: sequence length unknown (samples per step: {num(gbs)}{how}; the run "
            "config has no `seq_len`, and no `tokens_per_s` was logged)"
        )
    if micro and not gbs:
        why = world_from or "not in the run config"
        return (
            f"tokens: samples per step unknown: per_device_train_batch_size {micro} × "
            f"gradient_accumulation_steps {accum} × world size, which is {why} (log "
            "`world_size` in the run config); the sequence length is "
            + ("known" if cfg.get("seq_len") else "unknown too")
        )
    return (
        "tokens: tokens per step unknown (the run config has neither `tokens_per_step` "
        "nor `global_batch_size` and `seq_len`, and no `tokens_per_s` was logged)"
    )


def steps_how(inc: Incident) -> str:
    """The definition of steps lost (docs/definitions.md) with this incident's numbers."""
    if inc.steps_lost is None:
        return ""
    pairs = inc.stretches
    if len(pairs) > 1 and all(b is not None for _, b in pairs):
        parts = " + ".join(f"({b} − {a})" for a, b in pairs)
        return f"steps off the pre-spike trend: {parts}"
    if inc.recovery_step is not None:
        return f"recovery step {inc.recovery_step} − onset step {inc.onset_step}"
    if len(pairs) > 1 and inc.restart_checkpoint_step is None:
        parts = " + ".join(f"({b} − {a})" for a, b in pairs[:-1])
        return (
            f"steps off the pre-spike trend: {parts} + (last logged step − {pairs[-1][0]}, "
            "never recovered)"
        )
    text = f"last logged step − onset step {inc.onset_step} (never recovered)"
    if inc.restart_checkpoint_step is not None and inc.steps_lost > 0:
        text += (
            f", plus onset − restart checkpoint {inc.restart_checkpoint_step} "
            "(steps to train again)"
        )
    return text


def _gpu_hours(cost: Cost, inc: Incident, world_size: int | None) -> None:
    steps, secs = int(inc.steps_lost or 0), inc.seconds_per_step
    world, world_how = (
        (world_size, "--world-size") if world_size else (inc.world_size, "run config `world_size`")
    )
    if secs and world:
        cost.gpu_hours = refill_gpu_hours(inc.gpu_hours_lost, steps, secs, world, world_size)
        cost.gpu_hours_how = (
            f"{plural(steps, 'step')} × {num(secs)} s/step × {plural(world, 'GPU')} "
            f"({world_how}) ÷ 3600"
        )
        return
    if not secs:
        cost.unknown.append(
            "GPU-hours: time per step unknown (no `iter_time_ms`/`iter_time_s`, no wall-clock "
            "times, no `tokens_per_s` with a known batch size in the log)"
        )
    if not world:
        cost.unknown.append(
            "GPU-hours: number of GPUs unknown (pass `--world-size N` or log `world_size` "
            "in the run config)"
        )


def refill_gpu_hours(
    stored: float | None, steps: int, secs: float, world: float, world_size: int | None
) -> float:
    """Detect's GPU-hours, recomputed only where `--world-size` gives the GPU count (it
    wins) or detect did not know it."""
    return steps * secs * world / 3600 if world_size or stored is None else stored


def _dollars(cost: Cost, inc: Incident, gpu_hour_cost: float | None) -> None:
    if cost.gpu_hours is not None and gpu_hour_cost is not None:
        cost.usd = cost.gpu_hours * gpu_hour_cost
        cost.usd_how = f"{gpu_hours(cost.gpu_hours)} GPU-hours × {usd(gpu_hour_cost)}/GPU-hour"
    elif inc.cost_usd is not None:
        cost.usd, cost.usd_how = inc.cost_usd, "as priced by detect (`--gpu-hour-cost`)"
    elif cost.gpu_hours is not None:
        cost.unknown.append("dollars: price per GPU-hour unknown (pass `--gpu-hour-cost X`)")


def totals(
    stored: dict[str, Any] | None,
    incidents: list[Incident],
    world_size: int | None,
    gpu_hour_cost: float | None,
) -> dict[str, Any]:
    """The run's totals as detect stored them (`run_cost`: the union of the incidents' lost
    steps, docs/definitions.md). The report options only fill a factor detection did not
    know, as in `incident_cost`. A run detected before `run_cost` existed has no totals."""
    if stored is None:
        none: dict[str, Any] = {"steps": None, "tokens": None, "gpu_hours": None, "usd": None}
        return none | {"tokens_text": None, "overlap": 0, "own": None, "stale": True}
    steps, gpu_h, usd_ = stored["steps_lost"], stored["gpu_hours_lost"], stored["cost_usd"]
    first = incidents[0] if incidents else None
    world = world_size or (first.world_size if first else None)
    secs = first.seconds_per_step if first else None
    if steps is not None and secs and world:
        gpu_h = refill_gpu_hours(gpu_h, steps, secs, world, world_size)
    if gpu_h is not None and gpu_hour_cost is not None:
        usd_ = gpu_h * gpu_hour_cost
    overlap = int(stored["overlap_steps"] or 0)
    return {
        "steps": steps,
        "tokens": stored["tokens_lost"],
        "tokens_text": count(stored["tokens_lost"]),
        "gpu_hours": gpu_h,
        "usd": usd_,
        "overlap": overlap,
        "own": None if steps is None else steps + overlap,
        "stale": False,
    }
