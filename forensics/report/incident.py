"""Per-incident facts read off the curves: symptoms, recovery, outcome and steps lost.

Kept apart from rendering so figures and text use the same numbers (the recovery step
marked on the plot is the one the Outcome section states).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from forensics.report import series
from forensics.report.model import Incident
from forensics.report.series import Point

LATER_STEPS = 500  # "loss 500 steps later": the logbooks' yardstick for recovery
DETECTOR_STEPS_LOST = (
    "from detection: onset to recovery (or to the end of the run), plus checkpoint to onset "
    "for a restart"
)


@dataclass
class Symptoms:
    pre: Point | None  # the pre-spike level, at the last logged step before onset
    pre_how: str  # where `pre` comes from (the detector, or a median of the logged curve)
    peak: Point
    later: Point | None  # first logged value at or after peak + LATER_STEPS
    later_target: int
    grad_peak: Point | None
    grad_baseline: float | None
    onset_to_peak: int
    recovery: int | None  # first step back within noise of the pre-spike level
    nonfinite: int | None  # first NaN/Inf step of the metric between onset and recovery
    last: Point | None  # last logged value of the run


@dataclass
class Facts:
    symptoms: Symptoms
    level: float | None  # pre-spike level used for "recovered"
    threshold: float | None  # the level plus noise allowance
    window: tuple[int, int]  # steps shown in the incident figure and excerpt
    steps_lost: int | None
    steps_lost_how: str
    restart_step: int | None


def compute(inc: Incident, frame: pl.DataFrame, checkpoints: list[int]) -> Facts:
    sym = symptoms(inc, frame)
    base = series.baseline(frame, inc.metric, inc.onset_step)
    mad = base[1] if base else 0.0
    if not series.is_finite(inc.pre_value) and base is not None:
        step = sym.pre.step if sym.pre else inc.onset_step
        sym.pre = Point(step, base[0])
        sym.pre_how = f"median of the last {series.BASELINE_POINTS} logged values before the onset"
    level = sym.pre.value if sym.pre else None
    threshold = None
    if level is not None:
        sym.recovery = series.recovery_step(frame, inc.metric, inc.peak_step, level, mad)
        threshold = level + max(series.RECOVERY_TOL * abs(level), 3.0 * mad)
    upto = sym.recovery if sym.recovery is not None else (sym.last.step if sym.last else None)
    if upto is not None:
        sym.nonfinite = series.first_nonfinite(frame, inc.metric, inc.onset_step, upto)
    restart = restart_step(inc, checkpoints)
    lost, how = steps_lost(inc, sym, restart)
    return Facts(sym, level, threshold, window(inc, sym, frame), lost, how, restart)


def symptoms(inc: Incident, frame: pl.DataFrame) -> Symptoms:
    m = inc.metric
    pre = series.last_before(frame, m, inc.onset_step)
    pre_how = "last logged value before the onset"
    if series.is_finite(inc.pre_value):
        pre = Point(pre.step if pre else inc.onset_step, float(inc.pre_value))  # type: ignore[arg-type]
        pre_how = "the detector's pre-spike value"
    peak = Point(inc.peak_step, float(inc.peak_value)) if inc.peak_value is not None else None
    peak = peak or series.peak_between(frame, m, inc.onset_step, inc.end_step or inc.peak_step)
    peak = peak or Point(inc.peak_step, float("nan"))
    hi = max(inc.end_step or inc.peak_step, inc.peak_step)
    grad = series.peak_between(frame, "grad_norm", inc.onset_step, hi)
    if series.is_finite(inc.grad_norm_peak):
        grad = Point(grad.step if grad else inc.peak_step, float(inc.grad_norm_peak))  # type: ignore[arg-type]
    grad_base = series.baseline(frame, "grad_norm", inc.onset_step, points=50)
    target = inc.peak_step + LATER_STEPS
    col = series.column(frame, m)
    last = Point(int(col["step"][-1]), float(col["value"][-1])) if col.height else None
    return Symptoms(
        pre=pre,
        pre_how=pre_how,
        peak=peak,
        later=series.first_at_or_after(frame, m, target),
        later_target=target,
        grad_peak=grad,
        grad_baseline=grad_base[0] if grad_base else None,
        onset_to_peak=inc.peak_step - inc.onset_step,
        recovery=None,
        nonfinite=None,
        last=last,
    )


def restart_step(inc: Incident, checkpoints: list[int]) -> int | None:
    """The detector's restart checkpoint, else the last stored checkpoint before onset."""
    if inc.restart_checkpoint_step is not None:
        return int(inc.restart_checkpoint_step)
    before = [s for s in checkpoints if s < inc.onset_step]
    return before[-1] if before else None


def steps_lost(inc: Incident, sym: Symptoms, restart: int | None) -> tuple[int | None, str]:
    """Steps of training that bought no progress, with the reasoning in words."""
    if inc.steps_lost is not None:
        return int(inc.steps_lost), DETECTOR_STEPS_LOST
    if sym.recovery is not None:
        return (
            sym.recovery - inc.onset_step,
            f"recovery step {sym.recovery} − onset step {inc.onset_step}",
        )
    if sym.last is None:
        return None, ""
    if restart is not None:
        return (
            sym.last.step - restart,
            f"last logged step {sym.last.step} − restart checkpoint step {restart}: "
            "everything after the checkpoint must be trained again",
        )
    return (
        sym.last.step - inc.onset_step,
        f"last logged step {sym.last.step} − onset step {inc.onset_step} (at least: no "
        "checkpoint before the onset is known, so the redo may start earlier)",
    )


def window(inc: Incident, sym: Symptoms, frame: pl.DataFrame) -> tuple[int, int]:
    """Steps around the incident worth showing: some context before, the recovery after."""
    end = max(x for x in (inc.peak_step, inc.end_step, sym.recovery) if x is not None)
    pad = max(50, end - inc.onset_step)
    if frame.height == 0:
        return inc.onset_step - pad, end + pad
    first, last = int(frame["step"].min()), int(frame["step"].max())  # type: ignore[arg-type]
    return max(first, inc.onset_step - pad), min(last, end + pad)
