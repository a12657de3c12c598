"""A lone loss jump whose gradient stays within the gradient's own noise: noise, not a batch.

A batch hard enough to lift the loss by 15% lifts its own gradient norm with it (a rare-token
or corrupt batch moves it 3.5-1000x, BLOOM's 0.24 -> 960). A heavy-tailed micro-batch loss
(Student-t, AR) throws an occasional +15-50% point with no batch behind it, and then the
gradient norm, logged at the same step, does whatever its own noise does. So when the
gradient norm is logged every step, a lone jump (one point up, back within a few) whose
gradient is no higher than the gradient's noise routinely reaches is a near-miss.

"Routine" is read from the run's own gradient, not from a Gaussian bar: gradient noise is
heavy-tailed too (AR-t with 4 degrees of freedom in bench/synth_runs_t.py), and the largest
of several points of it is larger again. The statistic is the same at the jump and
everywhere else in the run:

    rise(t) = max(log g over the window starting at t) - median(log g over the LEVEL_POINTS
              points before the window)

with the window LEAD_STEPS before the jump to AFTER_STEPS after it (the jump's own points:
the loss peaks at its batch's gradient or up to 3 steps after it). Every window of the run
that holds no incident and no gradient spike (metric_spikes: the gradient's own events, not
its noise) gives one sample; the jump is quiet when its rise is below the
1 - `quiet_grad_chance` quantile of them (DetectConfig.quiet_grad_chance). An early,
falling gradient is no problem: the level is the median of the points just before.

A gradient logged every few steps cannot speak for the jump: the batch may have run at a
step the log does not print (its loss lingers to the next logged point through the update it
made, its one-step gradient is gone), so its quiet logged gradient clears nothing. A loss
averaged over the window beside a last-step gradient is the same case.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from numpy.lib.stride_tricks import sliding_window_view

from forensics.detect.config import DetectConfig
from forensics.detect.data import RunData
from forensics.detect.model import Incident
from forensics.detect.screen import Screen, metric_spikes
from forensics.detect.typing import RECOVERABLE

# The loss peaks at its batch's gradient or up to 3 steps after it (bench/synth_runs.py
# rare_tokens; BLOOM-176B's gradient climbed over 4 steps); one step after covers a logger
# that prints the gradient a step late.
LEAD_STEPS = 3
AFTER_STEPS = 1
# The gradient's level before a window: the median of this many points (a falling early
# gradient moves little over 10 steps).
LEVEL_POINTS = 10
# "Logged every step" is read over this many steps up to the jump.
EACH_STEP_HISTORY = 20
# Fewer noise windows than this give no quantile worth the name: the test refuses.
MIN_WINDOWS = 200


@dataclass(frozen=True)
class GradientRise:
    """How far the gradient rose over a jump's own steps, and how routine that is."""

    rise: float  # log grad norm: the window's top over the level before it
    chance: float  # fraction of the run's noise windows that rise at least as much
    windows: int  # noise windows the chance is read from


def gradient_each_step(data: RunData, step: int) -> bool:
    """The gradient norm is logged, finite, at `step` and at (nearly) every step of the
    EACH_STEP_HISTORY before it: then the jump's own gradient is in the log and can speak.
    The one criterion detection uses for "logged every step" near a jump (the quiet test,
    tails.tail_evidence)."""
    if not data.has("grad_norm"):
        return False
    st, v = data.aux["grad_norm"].window_steps(step - EACH_STEP_HISTORY, step)
    return (
        len(st) > EACH_STEP_HISTORY // 2
        and int(st[-1]) == step
        and bool(np.isfinite(v[-1]))
        and float(np.median(np.diff(st))) <= 1
    )


def gradient_speaks(inc: Incident, data: RunData) -> bool:
    """Can the jump's own gradient clear it: logged every step through one step past its
    peak (a logger a step late prints the batch's gradient there)? The one test both the
    quiet test and the noise-tail evidence ask, so that a jump the gradient cannot judge
    (one at the log's last step) gets the noise-tail evidence instead of neither."""
    return gradient_each_step(data, inc.peak_step + AFTER_STEPS)


def lone_jump(inc: Incident, sc: Screen, cfg: DetectConfig) -> bool:
    """A loss excursion that jumped at one logged point, had one peak, came back (it is
    recoverable) and carries no event: the shape a single batch gives. The jump is read on
    the loss itself, not on the refined onset: every point from the onset to the peak stays
    inside the screen's noise band (below `z_min` noise scales over the trailing trend) and
    below half the peak's rise over the incident's trend, so the loss left its noise by the
    jump's size at the peak. (The onset, refined on a mean-shift of the residual to a fitted
    trend, can sit points earlier on a noise bump a tenth of the jump's size.)"""
    if not (
        inc.origin == "loss"
        and len(inc.peaks) == 1
        and inc.type == RECOVERABLE
        and inc.end_step is not None
        and not inc.events
    ):
        return False
    if inc.onset_step == inc.peak_step:
        return True
    a, b = (int(k) for k in np.searchsorted(sc.steps, [inc.onset_step, inc.peak_step]))
    if b >= len(sc.steps) or int(sc.steps[b]) != inc.peak_step:
        return False
    r = sc.x[a : b + 1] - inc.trend.at(sc.steps[a : b + 1])
    in_noise = sc.lift[a:b] < cfg.z_min * sc.sigma[a:b]
    return bool(np.all(in_noise) and np.all(r[:-1] < r[-1] / 2))


def _rises(lg: np.ndarray, width: int) -> np.ndarray:
    """rise(t) for every window start t: the top of lg[t : t + width] over the median of the
    LEVEL_POINTS before t (NaN where either is incomplete or holds a NaN)."""
    n = len(lg)
    s = pl.Series(lg).fill_nan(None)
    top = s.rolling_max(width, min_samples=width).shift(-(width - 1))  # window t .. t+width-1
    level = s.rolling_median(LEVEL_POINTS, min_samples=LEVEL_POINTS).shift(1)  # t-L .. t-1
    out = (top - level).to_numpy().astype(float)
    return out[:n]


@dataclass(frozen=True)
class GradientNoise:
    """The run's gradient windows, computed once per run: the rise at each window start (by
    position in the gradient's log), and the sorted rises of the windows that hold no
    incident and no gradient spike (the gradient's noise)."""

    steps: np.ndarray
    rises: np.ndarray
    sample: np.ndarray

    def at(self, inc: Incident) -> GradientRise | None:
        """The rise over the jump's own steps and its chance among the noise windows; None
        when there is a gap in the log inside the window or a non-finite / zero value."""
        width = LEAD_STEPS + AFTER_STEPS + 1
        j = int(np.searchsorted(self.steps, inc.peak_step - LEAD_STEPS))
        if (
            j + width > len(self.steps)
            or int(self.steps[j + width - 1]) != inc.peak_step + AFTER_STEPS
        ):
            return None
        rise = float(self.rises[j])
        if not np.isfinite(rise):
            return None
        above = len(self.sample) - int(np.searchsorted(self.sample, rise, side="left"))
        return GradientRise(rise, above / len(self.sample), len(self.sample))


def gradient_noise(
    data: RunData, incidents: list[Incident], start: int, cfg: DetectConfig
) -> GradientNoise | None:
    """The gradient's windows from `start` on; None with fewer than MIN_WINDOWS noise ones."""
    g = data.aux["grad_norm"]
    ok = np.isfinite(g.values) & (g.values > 0)
    lg = np.where(ok, np.log(np.where(ok, g.values, 1.0)), np.nan)
    width = LEAD_STEPS + AFTER_STEPS + 1
    rises = _rises(lg, width)
    # a window touching an incident or a gradient spike (metric_spikes) is not noise
    bad = np.zeros(len(g.steps), dtype=bool)
    for i in incidents:
        a, b = np.searchsorted(g.steps, [i.onset_step - LEAD_STEPS, i.span_end], side="left")
        bad[a : b + 1] = True
    sp = metric_spikes(g.steps, g.values, cfg.grad_spike_ratio, cfg, start)
    bad[np.searchsorted(g.steps, sp.steps)] = True
    padded = np.concatenate([bad, np.zeros(width - 1, dtype=bool)])
    noise = np.isfinite(rises) & (g.steps >= start)
    noise &= ~np.asarray(sliding_window_view(padded, width).any(axis=1))
    if noise.sum() < MIN_WINDOWS:
        return None
    return GradientNoise(g.steps, rises, np.sort(rises[noise]))


def _candidate(inc: Incident, data: RunData, sc: Screen, cfg: DetectConfig) -> bool:
    """A lone jump, the loss back within `quiet_max_points` (a loss that stays up moved the
    model, whatever the gradient says), its gradient logged every step to one past it."""
    if not lone_jump(inc, sc, cfg):
        return False
    back, _ = data.loss.window_steps(inc.peak_step, inc.end_step or inc.peak_step)
    return len(back) <= cfg.quiet_max_points and gradient_speaks(inc, data)


def quiet_jumps(
    incidents: list[Incident], data: RunData, sc: Screen, start: int, cfg: DetectConfig
) -> list[tuple[Incident, GradientRise]]:
    """The lone jumps whose gradient rises no more than the run's gradient noise does in a
    fraction `quiet_grad_chance` of its windows (near-misses), with that rise."""
    candidates = [i for i in incidents if _candidate(i, data, sc, cfg)]
    noise = gradient_noise(data, incidents, start, cfg) if candidates else None
    if noise is None:
        return []
    found = [(i, noise.at(i)) for i in candidates]
    return [(i, r) for i, r in found if r is not None and r.chance >= cfg.quiet_grad_chance]
