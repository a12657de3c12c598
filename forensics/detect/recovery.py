"""Recovery advice and what an incident cost.

Advice, in order:
1. the winning rule's action for the incident's type (`recovery:` in the rule file);
2. with no rule (cause unknown): continue for a recoverable incident; lower_lr when it is
   lingering/divergent and recurs (other loss excursions within recurrence_steps);
   restart_from_checkpoint otherwise;
3. data_corruption that happened more than once in the run becomes data_swap: the source
   keeps producing bad batches, skipping one batch is not enough.

Restart checkpoint (for restart_from_checkpoint, lower_lr and data_swap, or any lingering or
divergent incident): the latest ingested checkpoint at least `gap` steps before the onset,
gap = min(checkpoint_gap, checkpoint_gap_fraction x run length) so that a 2,000-step run
looks 200 steps back, not 1,000; checkpoints with optimizer state are preferred (a restart
without them resets Adam's moments).

Cost: steps_lost = steps from the onset to recovery (or to the end of the run when it never
recovered) plus, for a restart, the steps between the checkpoint and the onset that must
be recomputed. Tokens = steps x tokens per step (config tokens_per_step, else
global_batch_size x seq_len, else tokens/s x seconds per step); GPU-hours = steps x seconds
per step x world_size / 3600; $ = GPU-hours x --gpu-hour-cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from forensics.detect.config import DetectConfig
from forensics.detect.data import RunData
from forensics.detect.features import number
from forensics.detect.model import Evidence, Incident
from forensics.detect.typing import RECOVERABLE

RESTARTS = ("restart_from_checkpoint", "lower_lr", "data_swap")


@dataclass(frozen=True)
class Checkpoint:
    step: int
    has_optimizer: bool | None
    path: str = ""


def action(inc: Incident, same_cause_count: int) -> str:
    best = next(
        (f for f in inc.findings if f.triggered and f.cause == inc.cause and f.recovery), None
    )
    if inc.cause == "data_corruption" and same_cause_count > 1:
        return "data_swap"
    if best is not None and best.recovery:
        return best.recovery
    if inc.type == RECOVERABLE:
        return "continue"
    recurs = (inc.features.get("recurrence") or 0) > 0  # type: ignore[operator]
    return "lower_lr" if recurs else "restart_from_checkpoint"


def restart_checkpoint(
    onset: int, checkpoints: list[Checkpoint], run_steps: int, cfg: DetectConfig
) -> tuple[Checkpoint | None, int]:
    gap = int(min(cfg.checkpoint_gap, max(1, cfg.checkpoint_gap_fraction * run_steps)))
    ok = [c for c in checkpoints if c.step <= onset - gap]
    with_opt = [c for c in ok if c.has_optimizer]
    pool = with_opt or ok
    return (max(pool, key=lambda c: c.step) if pool else None), gap


def advise(
    inc: Incident,
    data: RunData,
    checkpoints: list[Checkpoint],
    same_cause_count: int,
    cfg: DetectConfig,
    gpu_hour_cost: float | None = None,
) -> None:
    """Fill inc.recovery, restart checkpoint and cost fields (and their evidence)."""
    inc.recovery = action(inc, same_cause_count)
    if inc.recovery in RESTARTS or inc.type != RECOVERABLE:
        run_steps = max(1, data.last_step - data.first_step)
        ck, gap = restart_checkpoint(inc.onset_step, checkpoints, run_steps, cfg)
        if ck is not None:
            inc.restart_checkpoint_step = ck.step
            note = f"latest checkpoint >= {gap} steps before the onset"
            if not ck.has_optimizer:
                note += "; it has no optimizer state (Adam moments restart from zero)"
            inc.evidence.append(Evidence("restart_checkpoint", ck.step, note))
        else:
            inc.evidence.append(
                Evidence(
                    "restart_checkpoint",
                    None,
                    f"no ingested checkpoint >= {gap} steps before the onset",
                )
            )
    _cost(inc, data, gpu_hour_cost)


def step_seconds(data: RunData) -> float | None:
    """Seconds per optimizer step: iter_time_ms, else wall-clock, else tokens / throughput."""
    if data.has("iter_time_ms"):
        v = data.aux["iter_time_ms"].values
        v = v[np.isfinite(v) & (v > 0)]
        if len(v):
            return float(np.median(v)) / 1000.0
    if data.wall is not None and len(data.wall) > 2:
        st, w = data.wall.steps, data.wall.values
        ok = np.isfinite(w)
        ds, dw = np.diff(st[ok]), np.diff(w[ok])
        good = (ds > 0) & (dw > 0)
        if good.any():
            return float(np.median(dw[good] / ds[good]))
    tps, tok = _tokens_per_s(data), tokens_per_step(data)
    return tok / tps if tps and tok else None


def _tokens_per_s(data: RunData) -> float | None:
    if not data.has("tokens_per_s"):
        return None
    v = data.aux["tokens_per_s"].values
    v = v[np.isfinite(v) & (v > 0)]
    return float(np.median(v)) if len(v) else None


def tokens_per_step(data: RunData) -> float | None:
    cfg = data.config
    tok = number(cfg.get("tokens_per_step"))
    if tok:
        return tok
    gbs, seq = number(cfg.get("global_batch_size")), number(cfg.get("seq_len"))
    return gbs * seq if gbs and seq else None


def _cost(inc: Incident, data: RunData, gpu_hour_cost: float | None) -> None:
    stop = inc.end_step if inc.end_step is not None else data.last_step
    lost = max(0, stop - inc.onset_step)
    if inc.restart_checkpoint_step is not None and inc.recovery in RESTARTS:
        lost += inc.onset_step - inc.restart_checkpoint_step
    inc.steps_lost = lost
    secs = step_seconds(data)
    tok = tokens_per_step(data)
    if tok is None and secs is not None and _tokens_per_s(data):
        tok = secs * _tokens_per_s(data)  # type: ignore[operator]
    inc.tokens_lost = lost * tok if tok else None
    world = number(data.config.get("world_size"))
    if secs is not None and world:
        inc.gpu_hours_lost = lost * secs * world / 3600.0
        if gpu_hour_cost is not None:
            inc.cost_usd = inc.gpu_hours_lost * gpu_hour_cost
