"""Per-incident facts as stored by detect, plus the logged values a post-mortem quotes.

Nothing here decides anything: the recovery step, steps lost, restart checkpoint, grad-norm
peak and LR phase are columns detect wrote (docs/definitions.md). What is read off the
curves is only quoted (the median of the values logged from 500 steps after the peak, the
first NaN step, the last logged value), never used to re-judge the incident.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from forensics.report import series
from forensics.report.model import Incident
from forensics.report.series import Level, Point

LATER_STEPS = 500  # "loss 500 steps later": the logbooks' yardstick for recovery


@dataclass
class Stretch:
    start: int
    back: int | None
    peaks: list[Point]

    @property
    def steps(self) -> int | None:
        return None if self.back is None else self.back - self.start


@dataclass
class Symptoms:
    pre: Point | None  # the detector's pre-spike trend value at the onset
    peak: Point
    later: Level | None  # the level logged from peak + LATER_STEPS on
    later_target: int
    grad_peak: Point | None  # the detector's grad-norm peak and its step
    grad_baseline: float | None  # the detector's pre-spike median grad norm
    onset_to_peak: int
    recovery: int | None  # the detector's recovery step (type 1 only)
    # The stored stretches off the pre-spike trend when there are several (the loss came back
    # between peaks): (first step off, first step back or None), with each one's peaks.
    stretches: list[Stretch]
    nonfinite: int | None  # first NaN/Inf step of the metric from the onset
    last: Point | None  # last logged value of the run
    # A NaN the log only reports (`Model diverged with loss = NaN`, stored as an event at
    # the last step printed before it): the finite value logged at the peak step, which the
    # page must not call NaN. None when the peak's logged value is the non-finite one.
    reported: Point | None = None


@dataclass
class Facts:
    symptoms: Symptoms
    window: tuple[int, int]  # steps shown in the incident figure and excerpt
    steps_lost: int | None
    restart_step: int | None


def compute(inc: Incident, frame: pl.DataFrame) -> Facts:
    sym = symptoms(inc, frame)
    upto = sym.recovery if sym.recovery is not None else (sym.last.step if sym.last else None)
    if upto is not None:
        sym.nonfinite = series.first_nonfinite(frame, inc.metric, inc.onset_step, upto)
    return Facts(sym, window(inc, sym, frame), inc.steps_lost, inc.restart_checkpoint_step)


def _point(step: int | None, value: float | None) -> Point | None:
    return Point(int(step), float(value)) if step is not None and value is not None else None


def symptoms(inc: Incident, frame: pl.DataFrame) -> Symptoms:
    m = inc.metric
    peak = _point(inc.peak_step, inc.peak_value) or Point(inc.peak_step, float("nan"))
    grad_step = inc.grad_norm_peak_step if inc.grad_norm_peak_step is not None else None
    target = inc.peak_step + LATER_STEPS
    col = series.column(frame, m)
    last = Point(int(col["step"][-1]), float(col["value"][-1])) if col.height else None
    at_peak = col.filter(pl.col("step") == inc.peak_step)["value"]
    logged = float(at_peak[0]) if at_peak.len() else None
    reported = None
    if not series.is_finite(peak.value) and logged is not None and series.is_finite(logged):
        reported = Point(inc.peak_step, logged)
    return Symptoms(
        pre=_point(inc.onset_step, inc.pre_value),
        peak=peak,
        later=series.level_from(frame, m, target),
        later_target=target,
        grad_peak=_point(grad_step, inc.grad_norm_peak),
        grad_baseline=inc.grad_norm_baseline,
        onset_to_peak=inc.peak_step - inc.onset_step,
        recovery=inc.recovery_step,
        stretches=stretches(inc),
        nonfinite=None,
        last=last,
        reported=reported,
    )


def stretches(inc: Incident) -> list[Stretch]:
    """The stored stretches with the peaks each holds; empty for a single stretch."""
    pairs = inc.stretches
    if len(pairs) < 2:
        return []
    out = [Stretch(a, b, []) for a, b in pairs]
    for p in inc.peaks:
        for st in out:
            if (p.get("from"), p.get("back")) == (st.start, st.back):
                # a non-finite peak is stored as "NaN" (null in stores written before): NaN
                value = math.nan if p["value"] is None else float(p["value"])
                st.peaks.append(Point(int(p["step"]), value))
    return out


WINDOW_POINTS = 10  # logged points of context shown at least on each side of an incident


def window(inc: Incident, sym: Symptoms, frame: pl.DataFrame) -> tuple[int, int]:
    """Steps around the incident worth showing: some context before, the recovery after,
    and at least WINDOW_POINTS logged points on each side in a sparse log (timm logs every
    50 steps: 50 steps of context were one point, and no loss line was drawn before a NaN)."""
    end = max(x for x in (inc.peak_step, inc.end_step, sym.recovery) if x is not None)
    pad = max(50, end - inc.onset_step)
    if frame.height == 0:
        return inc.onset_step - pad, end + pad
    steps = frame["step"].unique().sort()
    gaps = steps.diff().drop_nulls()
    if gaps.len():
        pad = max(pad, WINDOW_POINTS * int(gaps.median()))  # type: ignore[arg-type]
    first, last = int(frame["step"].min()), int(frame["step"].max())  # type: ignore[arg-type]
    return max(first, inc.onset_step - pad), min(last, end + pad)
