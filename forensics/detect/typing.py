"""Spike types by recovery shape, defined so that a user can check them by hand.

- recoverable (type 1): within the recovery window after the last peak (500 steps, at least
  5 logged points), some point is back within max(tol, 2 sigma) of the pre-spike trend
  extrapolated past the spike, and so is the median of the 9 points from it (tol = 3%,
  widened to two standard errors of that median when the log is noisy). end_step = it.
  The first return counts: a test that the loss also stays back over the rest of the window
  would mostly measure how far a power law extrapolated 500 steps drifts from the real
  curve (+3 to +6% early in the real modded-nanogpt runs), not the spike.
- lingering (type 2): it stays finite but does not return: it settles above the tolerance
  (post_value = the median over the last third of the window).
- divergent (type 3): the loss turns non-finite for good inside the window (or the run ends
  at the peak), or it did not recover and either turns non-finite for good later or, from
  the end of the window to the end of the run, the 9-point median never falls below
  (1 + far_excess) x the pre-spike level (the lower of the trend at the peak and the best
  trend level the run had reached before the onset); when the run ends inside the window,
  the last third of what it logged after the peak is judged. A spike that recovered is not
  made divergent by an unrelated NaN thousands of steps later.

The pre-spike trend is a straight line in (log step, log loss) — a local power law, the
shape of a pre-training loss curve — fitted robustly (medians of two halves) on the history
before the onset, from the last step down in it (an epoch boundary, an LR milestone) on.
Its slope is clamped to [-1, 0]: a loss that was rising before the spike must not make the
spike look normal. A line that has fallen below the points next to the onset (the loss
flattened) is lifted onto them (_anchored). A collapse the onset ends (a degenerate
shard's, the loss back up to its old level after the spike) is left out of the fit
(_collapse). Points spanning less than MIN_SLOPE_SPAN (about 20% in steps: the few points
between a late start-up's end or an earlier incident and the onset) give the level only:
the slope is the earlier incident's trend's, else 0, since a slope fitted on them is noise
and, extrapolated over the recovery window, can cut the loss to a third.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from forensics.detect.config import DetectConfig
from forensics.detect.data import Metric
from forensics.detect.vocab import DIVERGENT, LINGERING, RECOVERABLE

# Standard error of the median of n Gaussian points, in sigma / sqrt(n) (sqrt(pi / 2)).
MEDIAN_SE = 1.2533


@dataclass(frozen=True)
class Trend:
    """x = level + slope * (log(step + 1) - log(ref_step + 1)), x being log-loss."""

    level: float
    slope: float
    ref_step: float
    n_points: int
    # the screen's space: log loss, or the loss as logged when some value is <= 0
    log: bool = True

    def at(self, steps: np.ndarray | float) -> np.ndarray:
        return self.level + self.slope * (np.log1p(steps) - np.log1p(self.ref_step))

    def resid(self, step: float, value: float) -> float | None:
        """How far a logged value sits above the trend, in the trend's space (None for a
        value <= 0 in log space; inf for a non-finite value)."""
        if not np.isfinite(value):
            return float("inf")
        if self.log:
            return float(np.log(value) - self.at(step)) if value > 0 else None
        return float(value - self.at(step))

    def value_at(self, step: float) -> float:
        """The trend at a step as a loss value (back from log space when it is in it)."""
        x = float(self.at(step))
        return float(np.exp(x)) if self.log else x


def fit_trend(
    steps: np.ndarray,
    x: np.ndarray,
    onset_step: int,
    cfg: DetectConfig,
    usable: np.ndarray | None = None,
    *,
    log: bool = True,
    shifts: np.ndarray | None = None,
    before: Trend | None = None,
) -> Trend:
    """Robust local power law on the points before the onset (see module doc). `usable`
    masks out points that belong to earlier incidents or to start-up, when enough remain;
    `log`: whether x is log loss (Screen.log_space), kept on the trend; `shifts`: steps
    where the schedule moves the loss's level (Screen.shifts); `before`: the trend an
    earlier incident was judged on, whose slope stands in when what came after it spans
    too little to measure one (MIN_SLOPE_SPAN)."""
    trend, span = _fit(steps, x, onset_step, cfg, usable, shifts, log)
    if trend.n_points and span < MIN_SLOPE_SPAN:
        trend = replace(trend, slope=before.slope if before is not None else 0.0)
    return replace(trend, log=log)


def _fit(
    steps: np.ndarray,
    x: np.ndarray,
    onset_step: int,
    cfg: DetectConfig,
    usable: np.ndarray | None,
    shifts: np.ndarray | None = None,
    log: bool = True,
) -> tuple[Trend, float]:
    """The trend, and the span of the points it was fitted on in log steps."""
    span = max(cfg.pre_steps, cfg.pre_fraction * onset_step)
    lo, hi = np.searchsorted(steps, [onset_step - span, onset_step], side="left")
    if hi - lo < 3:
        lo = max(0, hi - 3)
    st, xs = steps[lo:hi], x[lo:hi]
    # start-up is masked out by `usable`, but a collapse early in a fine-tune reads as the
    # initial descent: the history before it counts, start-up or not
    dip = _collapse(st, xs, steps, x, onset_step, cfg, shifts) if log else 0
    if dip >= 3:
        hi = lo + dip
        st, xs = st[:dip], xs[:dip]
    if usable is not None and usable[lo:hi].sum() >= 3:
        keep = usable[lo:hi]
        st, xs = st[keep], xs[keep]
    if len(xs) == 0:
        level = float(x[min(hi, len(x) - 1)]) if len(x) else 0.0
        return Trend(level, 0.0, float(onset_step), 0), 0.0
    trend = _two_halves(st, xs)
    cut = _last_step_down(st, xs, trend, cfg, shifts)
    if cut:
        st, xs = st[cut:], xs[cut:]
        trend = _two_halves(st, xs)
    return _anchored(st, xs, trend, cfg), float(np.log1p(st[-1]) - np.log1p(st[0]))


def _anchored(st: np.ndarray, xs: np.ndarray, trend: Trend, cfg: DetectConfig) -> Trend:
    """The trend lifted onto the points next to the onset when it has fallen below them. A
    power law fitted on hundreds of steps keeps falling where the loss flattens (an LR decayed
    to its floor: 4% under the loss 175 steps on in a step-decay run), and then a spike
    that was gone at the next point never reads as back. The slope stays; the level moves
    by the median residual of the last trend_anchor_points points when that exceeds 3
    standard errors and those points are not climbing: a precursor's climb (their later
    half's median above the earlier half's by 3 standard errors) must not lift the trend
    under the spike it leads to. Never down: a dip before the onset (a degenerate
    shard's collapse) is no level to measure the damage after it from."""
    k = cfg.trend_anchor_points
    if len(xs) < 2 * k:
        return trend
    m = float(np.median(xs[-k:] - trend.at(st[-k:])))
    se = MEDIAN_SE * _diff_noise(xs)  # a median of n points has se / sqrt(n)
    h = k // 2
    climb = float(np.median(xs[-h:]) - np.median(xs[-k:-h]))
    if m <= 3 * se / np.sqrt(k) or climb > 3 * se * np.sqrt(2 / h):
        return trend
    return Trend(trend.level + m, trend.slope, trend.ref_step, trend.n_points, trend.log)


def _two_halves(st: np.ndarray, xs: np.ndarray) -> Trend:
    half = len(xs) // 2
    if half < 2:
        return Trend(float(np.median(xs)), 0.0, float(np.median(st)), len(xs))
    t1, t2 = np.log1p(st[:half]), np.log1p(st[half:])
    x1, x2 = float(np.median(xs[:half])), float(np.median(xs[half:]))
    dt = float(np.median(t2) - np.median(t1))
    slope = (x2 - x1) / dt if dt > 1e-9 else 0.0
    ref = float(np.expm1(np.median(t2)))
    return Trend(x2, float(np.clip(slope, -1.0, 0.0)), ref, len(xs))


# Below this span in log steps (about 20% in steps) a history is too short to measure a
# slope: noise alone swings it across [-1, 0], and a line at -0.8 extrapolated 500 steps
# cuts the loss to a third.
MIN_SLOPE_SPAN = 0.2
STEP_POINTS = 5  # points on each side of a candidate step in _last_step_down


def _diff_noise(xs: np.ndarray) -> float:
    """Per-point noise of xs from its step-to-step differences (MAD x 1.4826 / sqrt 2): the
    slow trend cancels in a difference, and a spike touches two of hundreds. The one noise
    scale the trend's step-down and anchor tests compare their medians with."""
    d = np.diff(xs)
    return float(np.median(np.abs(d - np.median(d)))) * 1.4826 / np.sqrt(2)


def _last_step_down(
    st: np.ndarray, xs: np.ndarray, trend: Trend, cfg: DetectConfig, shifts: np.ndarray | None
) -> int:
    """Index just after a step down in the fitted history (0: none). An epoch boundary or an
    LR milestone drops the loss by several percent within a few steps; a power law fitted
    across the drop is steeper than the curve on either side, so extrapolated past the onset
    it runs below the loss, and a spike's recovery (or a NaN's calm neighbours) reads as
    lingering. The history from the step on is the curve the onset sits on. A step counts
    when the median of the STEP_POINTS residuals before it exceeds that of the STEP_POINTS
    after it by trend_step_min and 4 standard errors, held for trend_step_points points and
    trend_step_hold steps up to the onset: a degenerate shard's collapse below the trend
    also steps down, but the onset follows it closely (its damage, or its end). A step
    that begins within SHIFT_POINTS logged points of a schedule shift (`shifts`: an epoch
    start, an LR milestone) is the curve's own whatever its hold: a spike 160 steps after
    an epoch's drop is judged against the new level, not a trend across the drop."""
    k = STEP_POINTS
    n = len(xs)
    if n < k + cfg.trend_step_points:
        return 0
    r = xs - trend.at(st)
    noise = _diff_noise(xs)
    bar = max(float(np.log1p(cfg.trend_step_min)), 4 * MEDIAN_SE * noise * np.sqrt(2 / k))
    med = np.median(np.lib.stride_tricks.sliding_window_view(r, k), axis=1)  # med[i]: r[i:i+k]
    cuts = np.arange(k, n - cfg.trend_step_points + 1)
    held = (st[-1] - st[cuts] >= cfg.trend_step_hold) | _at_shift(st, cuts, shifts)
    cuts = cuts[held & (cuts <= len(med) - 1)]
    if not len(cuts):
        return 0
    drop = med[cuts - k] - med[cuts]
    best = int(np.argmax(drop))
    return int(cuts[best]) if drop[best] >= bar else 0


SHIFT_POINTS = 3  # a schedule shift shows in the loss within this many logged points
# A collapse: the loss falls this far (relative, and 6 noise scales) below the level before
# it for its last COLLAPSE_POINTS points or more before the onset.
COLLAPSE_MIN, COLLAPSE_POINTS = 0.15, 3


def _collapse(
    st: np.ndarray,
    xs: np.ndarray,
    steps: np.ndarray,
    x: np.ndarray,
    onset_step: int,
    cfg: DetectConfig,
    shifts: np.ndarray | None,
) -> int:
    """Index in st where a collapse the onset ends begins (0: none): a degenerate shard
    (repeated or empty text) drops the loss far below its level until it ends, and the
    loss then comes back up to about that level, with the damage the shard did on top. A
    trend fitted across the collapse runs at the collapse's level (2 where the loss had
    been 0.37 for 60 steps), and the return itself read as a x7 spike that never recovered:
    divergent. The history before the collapse is the curve. A step down the loss stays at
    after the incident is the curve's own (an epoch's drop, an LR milestone:
    _last_step_down), so the loss after the onset must be back nearer the level before the
    collapse than the collapse's own."""
    k, n = STEP_POINTS, len(xs)
    if n < k + COLLAPSE_POINTS:
        return 0
    bar = max(float(np.log1p(COLLAPSE_MIN)), 6 * _diff_noise(xs))
    for c in range(k, n - COLLAPSE_POINTS + 1):
        before = float(np.median(xs[c - k : c]))
        if not np.all(xs[c:] <= before - bar):
            continue
        if st[-1] - st[c] >= cfg.trend_step_hold or _at_shift(st, np.array([c]), shifts)[0]:
            return 0
        after = x[(steps > onset_step) & (steps <= onset_step + cfg.recovery_window)]
        after = after[np.isfinite(after)]
        level = float(np.median(xs[c:]))
        if len(after) < COLLAPSE_POINTS or np.median(after) < (before + level) / 2:
            return 0
        return c
    return 0


def _at_shift(st: np.ndarray, cuts: np.ndarray, shifts: np.ndarray | None) -> np.ndarray:
    """Which candidate cuts (indices into st) fall at or just after a schedule shift: the
    shift lies between the SHIFT_POINTS-th point before the cut and the cut."""
    if shifts is None or not len(shifts):
        return np.zeros(len(cuts), bool)
    lo = st[np.maximum(cuts - SHIFT_POINTS, 0)]
    first = np.searchsorted(shifts, lo, side="left")
    return (first < len(shifts)) & (shifts[np.minimum(first, len(shifts) - 1)] <= st[cuts])


def forward_median(x: np.ndarray, k: int, min_samples: int = 1) -> np.ndarray:
    """Median of x[i : i + k] for each i (fewer points at the end, down to `min_samples`;
    NaN below that)."""
    if len(x) == 0:
        return x
    rev = pl.Series(x[::-1]).rolling_median(k, min_samples=min_samples)
    return rev.to_numpy()[::-1].astype(float)


@dataclass
class Shape:
    """The typing verdict with every number it used (the incident's evidence)."""

    type: str
    end_step: int | None
    post_value: float | None
    settle_excess: float | None  # settled level / trend - 1
    tolerance: float  # tolerance actually applied (relative)
    window_steps: float
    window_end: float
    window_closed: bool
    nonfinite_for_good: bool
    notes: list[str] = field(default_factory=list)


def window_steps(cfg: DetectConfig, interval: float) -> float:
    """The recovery window in steps, widened so that it holds `min_window_points` points."""
    return max(float(cfg.recovery_window), cfg.min_window_points * interval)


def effective_tolerance(cfg: DetectConfig, sigma: float, k: int) -> float:
    """tolerance in log units, widened to 2 standard errors of a k-point median."""
    se = MEDIAN_SE * sigma / np.sqrt(max(k, 1))
    return float(max(np.log1p(cfg.tolerance), 2.0 * se))


def type_shape(
    loss: Metric,
    trend: Trend,
    last_peak_step: int,
    sigma: float,
    interval: float,
    cfg: DetectConfig,
    log_space: bool = True,
    best: float | None = None,
) -> Shape:
    """Type the incident from the loss after its last peak (see module doc). `best` is the
    lowest trend level the run had reached before the onset (log units): the divergence
    test compares with it too, so a spike that follows an unfinished one is not judged
    against a baseline the first one had already raised.

    Only the window (plus a margin) is read to decide recovery; the rest of the run is read
    in growing chunks, and only while the loss is still far above the pre-spike level, so
    typing costs the same in a 10k- and a 1M-step run."""
    w = window_steps(cfg, interval)
    wend = last_peak_step + w
    closed = bool(len(loss) and loss.steps[-1] >= wend)
    i0 = int(np.searchsorted(loss.steps, last_peak_step, side="right"))
    bad_from = nonfinite_tail(loss, i0, log_space)
    if i0 < len(loss) and bad_from is not None and bad_from <= wend:
        sts, xs = _finite(loss, i0, int(np.searchsorted(loss.steps, bad_from)), log_space)
        tol = effective_tolerance(cfg, sigma, min(cfg.smooth_points, max(len(xs), 1)))
        back = _recovered(sts, xs, trend, sigma, tol, w, wend, closed, cfg, log_space)
        if back is not None and _settled_before(back, sts, bad_from):
            return back
    if i0 >= len(loss) or (bad_from is not None and bad_from <= wend):
        st, v = loss.steps[i0:], loss.values[i0:]
        return _divergent_nonfinite(st, v, _ok(v, log_space), w, wend, closed, cfg)
    head = int(np.searchsorted(loss.steps, wend, side="right")) + cfg.smooth_points
    sts, xs = _finite(loss, i0, head, log_space)
    k = min(cfg.smooth_points, max(len(xs), 1))
    tol = effective_tolerance(cfg, sigma, k)
    shape = _recovered(sts, xs, trend, sigma, tol, w, wend, closed, cfg, log_space)
    if shape is None and bad_from is not None:  # not back, then non-finite for good
        st, v = loss.steps[i0:], loss.values[i0:]
        return _divergent_nonfinite(st, v, _ok(v, log_space), w, wend, closed, cfg)
    if shape is None:
        shape = _lingering(sts, xs, trend, tol, w, wend, closed, log_space)
        x_pre = float(trend.at(last_peak_step))
        if best is not None and np.isfinite(best):
            x_pre = min(x_pre, best)
        if _stays_far(loss, _tail_start(loss, i0, wend, closed), x_pre, cfg, log_space):
            shape.type = DIVERGENT
            shape.notes.append(
                f"the smoothed loss stayed >= {1 + cfg.far_excess:.2f} x the pre-spike level "
                "until the end of the run"
            )
        if not closed:
            shape.notes.append("the run ended before the recovery window closed")
    return shape


BACK_BEFORE_NAN = 3  # logged points back on the trend before a NaN that make it recovered


def _settled_before(shape: Shape, sts: np.ndarray, bad_from: float) -> bool:
    """The loss was back on its trend (the recovery test on the finite points `sts` before
    the run's non-finite tail) with at least BACK_BEFORE_NAN logged points from there: a
    spike that healed and a NaN that came later are two incidents, not one divergence that
    began at the spike (torchtune: a one-step blip at 40, back at 41, NaN from 65; a Hugging
    Face run back 10 steps after its spike at 350, then DeepSpeed's scale collapsing from
    375 and the loss NaN at 390). Notes it on the shape."""
    if shape.end_step is None or len(sts) < BACK_BEFORE_NAN:
        return False
    if int(np.searchsorted(sts, shape.end_step)) + BACK_BEFORE_NAN > len(sts):
        return False  # back on fewer logged points than that before the NaN: not settled
    shape.notes.append(
        f"back on its trend at step {shape.end_step}, before the loss went non-finite "
        f"(from step {int(bad_from)}): that is an incident of its own"
    )
    return True


def nonfinite_tail(loss: Metric, i0: int, log_space: bool = False) -> float | None:
    """Step where the run's non-finite tail (from point i0 on) begins; None when the last
    logged loss is finite."""
    if i0 >= len(loss) or _ok(loss.values[-1:], log_space)[0]:
        return None
    good = np.flatnonzero(_ok(loss.values[i0:], log_space))
    first = i0 + (int(good[-1]) + 1 if len(good) else 0)
    return float(loss.steps[first])


def _ok(v: np.ndarray, log_space: bool) -> np.ndarray:
    return np.isfinite(v) & ((v > 0) | (not log_space))


def _finite(loss: Metric, a: int, b: int, log_space: bool) -> tuple[np.ndarray, np.ndarray]:
    st, v = loss.steps[a:b], loss.values[a:b]
    ok = _ok(v, log_space)
    return st[ok], (np.log(v[ok]) if log_space else v[ok])


def _divergent_nonfinite(
    st: np.ndarray,
    v: np.ndarray,
    fin: np.ndarray,
    w: float,
    wend: float,
    closed: bool,
    cfg: DetectConfig,
) -> Shape:
    if len(v) == 0:
        note = "the run ended at the peak: nothing logged after it"
    else:
        good = np.flatnonzero(fin)
        first = int(good[-1]) + 1 if len(good) else 0  # start of the non-finite tail
        note = f"the loss is non-finite from step {int(st[first])} to the end of the run"
    return Shape(DIVERGENT, None, None, None, cfg.tolerance, w, wend, closed, len(v) > 0, [note])


def _recovered(
    sts: np.ndarray,
    xs: np.ndarray,
    trend: Trend,
    sigma: float,
    tol: float,
    w: float,
    wend: float,
    closed: bool,
    cfg: DetectConfig,
    log_space: bool,
) -> Shape | None:
    """Recoverable when, inside the window, a point and the forward median from it are back."""
    if len(xs) == 0:
        return None
    k = min(cfg.smooth_points, len(xs))
    mask, excess = _back_mask(sts, xs, trend, sigma, tol, k)
    back = np.flatnonzero(mask & (sts <= wend))
    if len(back) == 0:
        return None
    i = int(back[0])
    post = float(np.median(xs[i : i + k]))
    post = float(np.exp(post)) if log_space else post
    rel = float(np.expm1(tol))
    return Shape(
        RECOVERABLE, int(sts[i]), post, float(np.expm1(excess[i])), rel, w, wend, closed, False
    )


def _back_mask(
    sts: np.ndarray, xs: np.ndarray, trend: Trend, sigma: float, tol: float, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The recovery test at each point (the point within max(tol, 2 sigma) of the trend and
    the median of the k points from it within tol), and that median's excess over the trend."""
    at = trend.at(sts)
    excess = forward_median(xs, k) - at
    return (excess <= tol) & (xs - at <= point_allowance(tol, sigma)), excess


def point_allowance(tol: float, sigma: float) -> float:
    """How far (log units) the point where the loss is called back may sit from the trend:
    the tolerance, or 2 noise scales when the noise is wider (the 9-point median from it
    must still be within the tolerance)."""
    return max(tol, 2.0 * sigma)


def back_step(
    loss: Metric,
    trend: Trend,
    sigma: float,
    cfg: DetectConfig,
    after: int,
    before: int,
    log_space: bool = True,
) -> int | None:
    """First logged step in (after, before) where the loss is back on the trend by the same
    test as the type's (a point and the median of the `smooth_points` from it): where the
    loss came back between two peaks of one incident (recovery.off_trend)."""
    a = int(np.searchsorted(loss.steps, after, side="right"))
    b = int(np.searchsorted(loss.steps, before, side="left"))
    if b <= a:
        return None
    sts, xs = _finite(loss, a, b + cfg.smooth_points, log_space)
    k = min(cfg.smooth_points, max(len(xs), 1))
    tol = effective_tolerance(cfg, sigma, k)
    mask, _ = _back_mask(sts, xs, trend, sigma, tol, k)
    hit = np.flatnonzero(mask & (sts < before))
    return int(sts[hit[0]]) if len(hit) else None


def _lingering(
    sts: np.ndarray,
    xs: np.ndarray,
    trend: Trend,
    tol: float,
    w: float,
    wend: float,
    closed: bool,
    log_space: bool,
) -> Shape:
    settled, settle_step = _settled(sts, xs, wend, w)
    settle_excess = float(np.expm1(settled - trend.at(settle_step)))
    post = float(np.exp(settled)) if log_space else settled
    rel = float(np.expm1(tol))
    return Shape(LINGERING, None, post, settle_excess, rel, w, wend, closed, False)


def _tail_start(loss: Metric, i0: int, wend: float, closed: bool) -> int:
    """Where "to the end of the run" starts: the end of the recovery window, or the last
    third of what was logged after the peak when the run ended inside the window."""
    if closed:
        return int(np.searchsorted(loss.steps, wend, side="left"))
    return i0 + 2 * (len(loss) - i0) // 3


def _stays_far(loss: Metric, i0: int, x_pre: float, cfg: DetectConfig, log_space: bool) -> bool:
    """From point i0 on, the smoothed loss never falls below (1 + far_excess) x the pre-spike
    level before the run ends. Read in chunks that double, stopping at the first point that
    does."""
    far = x_pre + (np.log1p(cfg.far_excess) if log_space else cfg.far_excess * abs(x_pre))
    a, size, k = i0, 4096, cfg.smooth_points
    while a < len(loss):
        sts, xs = _finite(loss, a, a + size + k, log_space)
        if len(xs) and float(np.min(forward_median(xs, min(k, len(xs))))) < far:
            return False
        a, size = a + size, size * 2
    return True


def _settled(sts: np.ndarray, xs: np.ndarray, wend: float, w: float) -> tuple[float, float]:
    """Median level over the last third of the window (or of what the run logged of it)."""
    inside = sts <= wend
    s_in, x_in = (sts[inside], xs[inside]) if inside.any() else (sts[:1], xs[:1])
    tail = s_in >= s_in[-1] - w / 3
    return float(np.median(x_in[tail])), float(np.median(s_in[tail]))
