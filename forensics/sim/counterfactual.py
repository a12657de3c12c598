"""Replays that a sample run's README quotes: they show the cause, using the public replay API
(`resume` + `train_steps`) exactly as the replay stage will.

- stale_beta2: re-run the burst from the checkpoint with beta2 = 0.95 -> smaller echo.
- hardware_fault: re-run the faulted step from the checkpoint -> the grad norm is finite.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from forensics.sim.trainer import resume, train_steps


def _row(rows: list[dict[str, Any]], step: int) -> dict[str, Any]:
    return next(r for r in rows if r["step"] == step)


def stale_beta2_lines(
    run_dir: Path, rows: list[dict[str, Any]], ckpt: int, at: int, n: int
) -> list[str]:
    """Replay with beta2 = 0.95 from `ckpt` through the burst and 15 steps after it."""
    state = resume(run_dir, ckpt, beta2=0.95)
    replay = train_steps(state, at + n + 15 - ckpt)
    after = at + n  # first ordinary batch after the burst
    window = range(after, after + 5)
    logged = [_row(rows, s)["loss"] for s in window]
    fixed = [_row(replay, s)["loss"] for s in window]
    upd_logged = max(_row(rows, s)["update_norm"] for s in range(at, after + 15))
    upd_fixed = max(_row(replay, s)["update_norm"] for s in range(at, after + 15))
    fmt = ", ".join
    return [
        f"- counterfactual (`resume(run, {ckpt}, beta2=0.95)` + `train_steps`, same batches): "
        f"loss at steps {after}-{after + 4} is {fmt(f'{v:.2f}' for v in fixed)} instead of "
        f"{fmt(f'{v:.2f}' for v in logged)}; peak update norm {upd_fixed:.2f} instead of "
        f"{upd_logged:.2f}",
    ]


def hardware_fault_lines(
    run_dir: Path, rows: list[dict[str, Any]], ckpt: int, at: int
) -> list[str]:
    """Replay the faulted step on healthy hardware (no fault): the grad norm is finite."""
    state = resume(run_dir, ckpt)
    replay = train_steps(state, at - ckpt)
    logged, again = _row(rows, at)["grad_norm"], _row(replay, at)["grad_norm"]
    same = all(_row(rows, s)["loss"] == _row(replay, s)["loss"] for s in range(ckpt + 1, at + 1))
    return [
        f"- replay (`resume(run, {ckpt})` + `train_steps`): grad norm at step {at} is "
        f"{again:.3g} ({'finite' if math.isfinite(again) else 'non-finite'}) instead of the "
        f"logged {logged}; losses of steps {ckpt + 1}-{at} reproduce bit for bit: {same}",
    ]


def replay_notes(
    scenario: str, run_dir: Path, rows: list[dict[str, Any]], ckpt: int, at: int, strength: float
) -> list[str]:
    """README lines for the scenarios where a replay shows the cause; [] for the others."""
    if scenario == "stale_beta2":
        return stale_beta2_lines(run_dir, rows, ckpt, at, int(strength))
    if scenario == "hardware_fault":
        return hardware_fault_lines(run_dir, rows, ckpt, at)
    return []
