"""The machinery of the optimizer counterfactuals: re-run the window with one change and
measure what the updates did, in the original replay and in the counterfactual.

Both runs start from the same state (after step `plan.start`, k // 4 steps before the onset)
and see the same logged batches. What an optimizer can get wrong it gets wrong through its
updates, so the measures are about the updates:

- the loss the updates added: x(t) = loss(t) - b(t) for each window step t after the first
  (whose loss comes from the shared state), where b(t) is the loss of batch t on the
  window-start model. X = max x(t) for the log (X_log), the replay with the run's settings
  (X_orig) and the counterfactual (X_cf), taken over the *ordinary* batches only: those whose
  own cost b(t) is within the noise allowance of the pre-spike trend (and finite). A batch that
  is hard in itself (rare tokens, garbage, an overflowing batch) is the data's signature, and
  its huge loss moves with any change of the model; an optimizer fault shows as loss added on
  ordinary batches (echoes, lingering, divergence);
- the update norm |delta theta| (largest in the window, against the pre-spike level: the
  median of the 30 replayed steps before the onset);
- Adam's normalized step |delta theta| / lr (the size of m / sqrt(v)), the same way: a stale
  second moment shows up as this step blowing up, a too-high LR does not need it to.

With a = 3 x the robust noise of the logged loss and E_log = the logged loss excess over the
pre-spike trend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from forensics.replay.measure import token_losses
from forensics.replay.plan import BIG, PRE_WINDOW, excess, fmt_excess
from forensics.replay.plan import fmt_num as n
from forensics.replay.probes.base import Session
from forensics.replay.state import StepRow, advance, clone, set_hparams
from forensics.sim.model import GPT
from forensics.sim.trainer import TrainState


@dataclass
class SecondMomentReset:
    """A trainer `Fault` that, at `step`, raises Adam's exp_avg_sq to the current (clipped)
    squared gradient wherever it is smaller, so that the step's bias-corrected second moment
    is at least g**2. Never lowering v means the reset can only shrink updates, never create
    the large m / sqrt(v) of a zeroed v."""

    step: int
    state: TrainState

    @torch.no_grad()
    def apply(self, model: GPT) -> dict[str, Any]:
        grads = {p: p.grad for p in model.parameters() if p.grad is not None}
        norm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads.values()])))
        clip = self.state.cfg.grad_clip
        coef = min(1.0, clip / (norm + 1e-6)) if clip > 0 and math.isfinite(norm) else 1.0
        reset = raise_second_moment(self.state.optimizer, grads, coef)
        return {"reset_params": reset, "clip_coef": coef}


@torch.no_grad()
def raise_second_moment(
    optimizer: torch.optim.Optimizer, grads: dict[Any, torch.Tensor], coef: float
) -> int:
    """Raise each parameter's exp_avg_sq to (coef * g)**2 * (1 - beta2**step) where smaller
    (coef: the clip coefficient the step will apply; 1 when the gradients are already clipped),
    so that the coming step's bias-corrected second moment is at least its squared gradient.
    Returns how many parameters it touched; beta2 is read from each parameter's group."""
    beta2_of = {p: g["betas"][1] for g in optimizer.param_groups for p in g["params"]}
    reset = 0
    for p, g in grads.items():
        st = optimizer.state.get(p)
        if not st or "exp_avg_sq" not in st:
            continue
        fresh = (g * coef).pow(2) * (1.0 - beta2_of[p] ** float(st["step"]))
        torch.maximum(st["exp_avg_sq"], fresh, out=st["exp_avg_sq"])
        reset += 1
    return reset


def rerun(s: Session, changes: dict[str, Any], *, reset: bool) -> dict[int, StepRow]:
    """The window re-run from the start snapshot with TrainConfig `changes` (and the reset)."""
    assert s.start is not None
    state = set_hparams(clone(s.start), **changes)
    at = max(state.step + 1, s.plan.offending)  # where the gradient suddenly grows
    faults = [SecondMomentReset(at, state)] if reset else []
    return {int(r["step"]): r for r in advance(state, s.data, s.plan.end, faults)}


@torch.no_grad()
def batch_costs(s: Session, steps: list[int]) -> dict[int, float]:
    """b(t): the loss of each window batch on the window-start model (no update in between),
    i.e. what the batch itself costs; cached on the session (both counterfactuals use it)."""
    if s.costs is None:
        s.costs = {}
    for t in steps:
        if t not in s.costs:
            if s.replayer is not None:
                s.costs[t] = s.replayer.cost(t)
                continue
            assert s.start is not None
            s.costs[t] = float(token_losses(s.start.compute, s.batch(t)).mean())
    return s.costs


def noise_allowance(s: Session) -> float:
    """a: 3 x the robust noise of the logged loss before the incident."""
    return 3.0 * s.plan.noise


def is_ordinary(s: Session, cost: float) -> bool:
    """A batch whose own cost b(t) is finite and within the noise allowance of the pre-spike
    trend; the others are hard in themselves (the data's signature: module doc)."""
    return math.isfinite(cost) and cost - s.plan.trend <= noise_allowance(s)


def trajectory_excess(loss: float | None, cost: float) -> float:
    """loss(t) - b(t): the part of a step's loss that the updates since the window start
    added; a NaN/Inf loss on a batch that is finite at the start counts as BIG."""
    if loss is None:
        return 0.0
    if not math.isfinite(loss):
        return BIG if math.isfinite(cost) else 0.0
    return loss - cost if math.isfinite(cost) else 0.0


def _steps_per_lr(rows: list[StepRow]) -> list[float]:
    return [float(r["update_norm"]) / float(r["lr"]) for r in rows if float(r["lr"]) > 0]


def _max(values: list[float]) -> float:
    vals = [v for v in values if math.isfinite(v)]
    return max(vals) if vals else math.nan


def _pre_level(values: list[float]) -> float:
    vals = [v for v in values[-PRE_WINDOW:] if math.isfinite(v) and v > 0]
    return float(np.median(vals)) if vals else math.nan


@dataclass
class Window:
    """The measures of one counterfactual against the original replay (module doc)."""

    e_log: float
    x_log: float
    x_orig: float
    x_cf: float
    a: float
    u_pre: float  # update norm: pre-spike level, largest original, largest counterfactual
    u_orig: float
    u_cf: float
    r_pre: float  # normalized step |delta theta| / lr, the same three
    r_orig: float
    r_cf: float

    @property
    def kept(self) -> float:
        """Share of the original's added loss (above the noise) the counterfactual keeps."""
        return (self.x_cf - self.a) / (self.x_orig - self.a)

    def updates_near_pre(self) -> bool:
        """The counterfactual's updates stay within 2x the pre-spike level, or it removes at
        least half of the original's update excess over that level."""
        u = (self.u_pre, self.u_orig, self.u_cf)
        if not all(math.isfinite(v) for v in u):
            return True
        return self.u_cf <= 2.0 * self.u_pre or self.u_cf - self.u_pre <= 0.5 * (
            self.u_orig - self.u_pre
        )

    def facts(self) -> str:
        return (
            f"loss added by the updates: logged {n(self.x_log)}, replayed {n(self.x_orig)}, "
            f"counterfactual {n(self.x_cf)}; spike over trend {fmt_excess(self.e_log)}, noise "
            f"allowance {n(self.a, 3)}; update norm peaks {n(self.u_cf, 3)} vs "
            f"{n(self.u_orig, 3)} ({_pre(self.u_pre)}); normalized step peaks "
            f"{n(self.r_cf, 3)} vs {n(self.r_orig, 3)} ({_pre(self.r_pre)})"
        )


def _pre(level: float) -> str:
    """The pre-spike level, or why there is none (the window starts after the onset, at the
    latest checkpoint before the offending step: no replayed step precedes the incident)."""
    if math.isfinite(level):
        return f"pre-spike {n(level, 3)}"
    return "no replayed step before the onset"


def measure(s: Session, steps: list[int], cf: dict[int, StepRow]) -> tuple[Window, dict[str, Any]]:
    """The Window of a counterfactual over `steps`, and the series behind it (numbers)."""
    orig_rows, cf_rows = [s.rows[t] for t in steps], [cf[t] for t in steps]
    costs = [batch_costs(s, steps)[t] for t in steps]
    logged = [s.data.value("loss", t) for t in steps]
    first = min(s.plan.incident.onset, s.plan.offending)
    pre_rows = [r for t, r in sorted(s.rows.items()) if t < first]
    a = noise_allowance(s)
    ordinary = [i for i, c in enumerate(costs) if is_ordinary(s, c)]

    def peak(losses: list[float | None]) -> float:
        """Largest added loss over the ordinary batches (0 when there is none)."""
        return max((trajectory_excess(losses[i], costs[i]) for i in ordinary), default=0.0)

    w = Window(
        e_log=max(excess(x, s.plan.trend) for x in logged),
        x_log=peak(logged),
        x_orig=peak([float(r["loss"]) for r in orig_rows]),
        x_cf=peak([float(r["loss"]) for r in cf_rows]),
        a=a,
        u_pre=_pre_level([float(r["update_norm"]) for r in pre_rows]),
        u_orig=_max([float(r["update_norm"]) for r in orig_rows]),
        u_cf=_max([float(r["update_norm"]) for r in cf_rows]),
        r_pre=_pre_level(_steps_per_lr(pre_rows)),
        r_orig=_max(_steps_per_lr(orig_rows)),
        r_cf=_max(_steps_per_lr(cf_rows)),
    )
    series = {
        "start_step": s.plan.start, "end_step": s.plan.end, "trend_loss": s.plan.trend,
        "steps": steps, "batch_cost": costs,
        "hard_batch_steps": [t for i, t in enumerate(steps) if i not in ordinary],
        "original_loss": [float(r["loss"]) for r in orig_rows],
        "counterfactual_loss": [float(r["loss"]) for r in cf_rows],
        "original_update_norm": [float(r["update_norm"]) for r in orig_rows],
        "counterfactual_update_norm": [float(r["update_norm"]) for r in cf_rows],
        "lr": [float(r["lr"]) for r in orig_rows],
        "counterfactual_lr": [float(r["lr"]) for r in cf_rows],
    }  # fmt: skip
    named = {
        "logged_excess": w.e_log, "logged_trajectory_excess": w.x_log,
        "original_trajectory_excess": w.x_orig, "counterfactual_trajectory_excess": w.x_cf,
        "noise_allowance": w.a, "kept": w.kept if w.x_orig > w.a else None,
        "pre_spike_update_norm": w.u_pre, "original_max_update_norm": w.u_orig,
        "counterfactual_max_update_norm": w.u_cf, "pre_spike_step_per_lr": w.r_pre,
        "original_max_step_per_lr": w.r_orig, "counterfactual_max_step_per_lr": w.r_cf,
    }  # fmt: skip
    return w, named | series
