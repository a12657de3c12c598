"""The vectorised screen: one pass over every logged point proposes spike candidates.

Everything here is a rolling statistic over the whole series (polars rolling windows), so
the cost is linear in the run's length; the expensive refinement (refine.py) only looks at
the few windows this screen proposes.

Loss is screened in log space: a spike is a ratio to the local trend, which makes the
thresholds the same at loss 10 and at loss 2.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from forensics.detect.config import DetectConfig
from forensics.detect.typing import forward_median

MAD_TO_SIGMA = 1.4826
# An excursion may contain this many unflagged points and still be one excursion.
GAP_POINTS = 2


@dataclass
class Screen:
    """Per-point screen of one series (finite points only), plus the flagged candidates."""

    steps: np.ndarray
    x: np.ndarray  # log-value (or value / median when the series can be <= 0)
    trend: np.ndarray  # trailing median of the previous points (NaN before it exists)
    resid: np.ndarray  # x - trend
    lift: np.ndarray  # x - point_base: what the point test reads (<= resid's base, so >=)
    sigma: np.ndarray  # robust noise scale of resid at each point
    level: np.ndarray  # short trailing median minus the lowest recent trend
    burn_in: int  # index of the first screened point
    flagged: np.ndarray  # bool: candidate points
    sharp: np.ndarray  # bool: flagged by the point test (a jump), not only by the slow test
    low: np.ndarray  # bool: far below the trend (>= rise_min and z_min sigmas): kept out of it
    z_need: np.ndarray  # sigmas the point test asked for at each point
    log_space: bool = True
    both_sides_from: int | None = None  # first start-up index the both-sides test judged
    # steps where the schedule shifts the loss's level (an epoch begins, the LR drops 2x or
    # more): a step down there is the curve's, not a corrupt shard's (typing.fit_trend)
    shifts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def best_before(self, step: int) -> float | None:
        """Lowest trend level after start-up and before `step` (log units), if any."""
        i = int(np.searchsorted(self.steps, step))
        seg = self.trend[self.burn_in : i]
        seg = seg[np.isfinite(seg)]
        return float(seg.min()) if len(seg) else None

    def ratio(self, i: int) -> float:
        """value / trend at point i, as a plain ratio."""
        return float(np.exp(self.resid[i])) if self.log_space else float(1 + self.resid[i])


def to_log(values: np.ndarray) -> tuple[np.ndarray, bool]:
    """Log of a positive series; a series with values <= 0 (an RL policy loss, a Gaussian
    NLL) is screened as it is logged. Every stage reads such a loss in its own units (the
    trend an incident is typed against, the values a page quotes): a series rescaled here
    put a GRPO spike to 3.42 on the page as 55.6, at "x-278" its trend."""
    if len(values) and np.all(values > 0):
        return np.log(values), True
    return np.asarray(values, dtype=float).copy(), False


def centred_median(x: np.ndarray, k: int) -> np.ndarray:
    """Median of the k points centred on each point (fewer at the ends); NaN skipped."""
    s = pl.Series(x).fill_nan(None).rolling_median(k, min_samples=1, center=True)
    return s.to_numpy().astype(float)


def trailing_median(x: np.ndarray, window: int, *, shift: int = 1) -> np.ndarray:
    """Median of the `window` points before each point (the point itself excluded). NaN
    points are skipped; where a window holds none, the last median carries forward."""
    s = pl.Series(x).fill_nan(None).rolling_median(window, min_samples=max(3, window // 4))
    s = s.shift(shift).fill_null(strategy="forward")
    return s.to_numpy().astype(float)


def block_mad(v: np.ndarray, window: int) -> np.ndarray:
    """Trailing MAD (around the local median) of v at each point, from the blocks of
    window/4 points before the point's own block.

    The noise scale moves slowly, so it is computed per block (one vectorised median over
    a reshaped array) instead of per point: a rolling median of a 200-point window over a
    million points costs seconds, this costs tens of milliseconds."""
    n = len(v)
    b = max(5, window // 4)
    m = -(-n // b)
    padded = np.full(m * b, np.nan)
    padded[:n] = v
    blocks = padded.reshape(m, b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN blocks stay NaN
        centre = np.nanmedian(blocks, axis=1, keepdims=True)
        mad = np.nanmedian(np.abs(blocks - centre), axis=1)
    trailing = pl.Series(mad).fill_nan(None).rolling_median(4, min_samples=1).shift(1)
    return np.repeat(trailing.to_numpy().astype(float), b)[:n]


CENTRED_POINTS = 21


def robust_sigma(x: np.ndarray, resid: np.ndarray, window: int) -> np.ndarray:
    """Point noise scale: the MAD of first differences / sqrt(2), blind to the trend (the
    trailing median lags a falling loss, which inflates a residual-based scale early in
    training). A logger that smooths its loss has tiny differences, so the scale is kept
    at >= 1/3 of the residual MAD, and >= half the run's typical scale so flat stretches
    (a quantised log, a plateau) do not make every wiggle many sigmas."""
    diff = np.concatenate([[np.nan], np.diff(x)])
    sig_d = block_mad(diff, window) * MAD_TO_SIGMA / np.sqrt(2)
    # the wander of a smoothed loss around a centred median: the trailing trend's own lag on
    # a steep descent (a short fine-tune's first hundred steps) is no noise
    sig_r = block_mad(x - centred_median(x, CENTRED_POINTS), window) * MAD_TO_SIGMA
    sig = np.fmax(sig_d, sig_r / 3)
    finite = sig[np.isfinite(sig)]
    typical = float(np.median(finite)) if len(finite) else _whole_series_sigma(x)
    floor = max(0.5 * typical, 1e-4)
    sig = np.where(np.isfinite(sig), sig, typical)
    return np.maximum(sig, floor)


def _whole_series_sigma(x: np.ndarray) -> float:
    """Noise scale of a series too short for a trailing estimate (an excerpt of a few dozen
    points): the MAD of all its first differences, which one spike barely moves."""
    d = np.diff(x[np.isfinite(x)])
    if len(d) < 3:
        return 0.01
    mad = float(np.median(np.abs(d - np.median(d)))) * MAD_TO_SIGMA / np.sqrt(2)
    return mad if mad > 0 else 0.01


def history_points(n: int, cfg: DetectConfig) -> int:
    """Points of history the screen needs before it screens: `burn_in_points`, shrunk for
    a short log to a quarter of it (at least `short_history_points`)."""
    return min(cfg.burn_in_points, max(cfg.short_history_points, n // 4))


def burn_in_index(x: np.ndarray, trend: np.ndarray, cfg: DetectConfig) -> int:
    """First point after start-up: enough history, and past part of the initial descent."""
    n = len(x)
    if n == 0:
        return 0
    x0 = float(np.median(x[:5]))
    # the lowest level the loss holds for ~50 points (a run of degenerate batches far below
    # the trend is not where the descent ends)
    held = centred_median(x, 101)
    lowest = float(np.nanmin(held)) if len(held) else x0
    if x0 - lowest < cfg.rise_min:  # no initial descent to wait for (an excerpt, a fine-tune)
        return min(n, history_points(n, cfg))
    target = x0 - cfg.burn_in_descent * max(0.0, x0 - lowest)
    below = np.flatnonzero(np.isfinite(trend) & (trend <= target))
    first = int(below[0]) if len(below) else n
    return min(n, max(history_points(n, cfg), first))


def level_shift(x: np.ndarray, trend: np.ndarray, cfg: DetectConfig) -> np.ndarray:
    """Short trailing median minus the lowest trend of the recent past: a sustained rise."""
    short = (
        pl.Series(x).fill_nan(None).rolling_median(cfg.level_points, min_samples=cfg.level_points)
    )
    base = (
        pl.Series(trend)
        .fill_nan(None)
        .rolling_min(cfg.level_lookback_points, min_samples=1)
        .shift(cfg.level_points)
    )
    return (short - base).to_numpy().astype(float)


def screen_series(
    steps: np.ndarray, values: np.ndarray, cfg: DetectConfig, startup_until: int = 0
) -> Screen:
    """Screen the finite points of one series; `values` must be finite. Until step
    `startup_until` (at least cfg.startup_steps) only a doubling counts at start-up."""
    x, log_space = to_log(values)
    trend = trailing_median(x, cfg.trend_points)
    resid = x - trend
    sigma = robust_sigma(x, resid, cfg.scale_points)
    start = burn_in_index(x, trend, cfg)
    low = np.nan_to_num(resid <= -np.maximum(cfg.rise_min, cfg.z_min * sigma), nan=False)
    low[:start] = False
    if low.any():  # far-below points (degenerate batches) must not drag the trend down
        kept = np.where(low, np.nan, x)
        trend = trailing_median(kept, cfg.trend_points)
        resid = x - trend
        sigma = robust_sigma(kept, resid, cfg.scale_points)
    level = level_shift(np.where(low, np.nan, x), trend, cfg)
    z_need = np.where(after_dip(low, cfg.after_dip_points), cfg.after_dip_z, 1.0) * cfg.z_min
    lift = x - point_base(x, trend, cfg)
    point = (lift >= cfg.rise_min) & (lift >= z_need * sigma)
    slow = (level >= cfg.rise_min) & (level >= 0.6 * cfg.z_min * sigma)
    sharp = np.nan_to_num(point, nan=False).astype(bool)
    flagged = sharp | np.nan_to_num(slow, nan=False).astype(bool)
    flagged[:start] = False
    sharp[:start] = False
    both_from = None
    if log_space and start:
        end = lag_end(x, trend, start, cfg)
        jump, both_from = startup_spikes(steps, x, end, cfg, startup_until)
        flagged[:end] |= jump
        sharp[:end] |= jump
    return Screen(
        steps, x, trend, resid, lift, sigma, level, start, flagged, sharp, low, z_need,
        log_space, both_from,
    )  # fmt: skip


def point_base(x: np.ndarray, trend: np.ndarray, cfg: DetectConfig) -> np.ndarray:
    """What the point test measures a point against: the trailing trend, or the median of
    the `recent_points` points before it where that is lower. A loss that falls faster than
    a 21-point median follows sits below its trend; against the trend, a spike back up to
    where the loss was 10 points ago looks no higher than noise (a too-high LR's first
    growing spike while the loss still falls fast: +25% and 27x the grad norm, 6 noise
    scales above the trend, 9 above the loss before it; modded-nanogpt SOAP's 4.168 at step
    3361, 7.8 over its trend of 3.476 and 8.9 over the 3.385 the loss was at, where Muon
    spikes too). Where the loss holds level the two agree within the noise."""
    return np.fmin(trend, trailing_median(x, cfg.recent_points))


def lag_end(x: np.ndarray, trend: np.ndarray, start: int, cfg: DetectConfig) -> int:
    """First point from `start` on where the trailing trend has caught up with the loss
    (within rise_min of its 3-point median). In a steep descent just after start-up the
    21-point trend still sits far above the loss, so a spike there is no higher than the
    trend and only the start-up test, which compares it with the loss on both sides, sees it."""
    lag = np.nan_to_num(trend - trailing_median(x, 3) >= cfg.rise_min, nan=False)
    rest = np.flatnonzero(~lag[start:])
    return start + int(rest[0]) if len(rest) else len(x)


def startup_spikes(
    steps: np.ndarray, x: np.ndarray, start: int, cfg: DetectConfig, until: int = 0
) -> tuple[np.ndarray, int | None]:
    """Spikes among the first `start` points, where the long trailing trend lags the descent
    and the noise scale is not yet known. A point counts when it doubles the median of the 3
    points before it (`startup_jump`: no descent or warm-up noise does that, a garbage
    batch does), or when it stands out on both sides: above the 3 points before it and above
    where the loss comes back to within the next `startup_return_points` points, each by
    rise_min and z_min start-up noise scales. A descent is below the points before it, and
    a rise that stays (the LR warming up, the loss-scale search) never comes back: neither
    is a spike. The noise scale is that of the first differences over start-up. Only the
    doubling counts in the first `startup_steps` steps, the optimizer's own start, and up to
    `until`: the end of the fp16 loss-scale search that began there, where the log shows it
    (Megatron averages a window's loss over the steps it did not skip, so a window the
    search skipped four steps of in five prints one step's noisy loss). Also returns the
    first index the both-sides test judged (None: none), for the coverage note."""
    seg = x[: min(len(x), start + cfg.startup_return_points)]
    before = seg - trailing_median(seg, 3)
    jump = np.nan_to_num(before >= cfg.startup_jump, nan=False)[:start]
    d = np.diff(seg[np.isfinite(seg)])
    if len(d) < 8:
        return jump, None
    sigma = float(np.median(np.abs(d - np.median(d)))) * MAD_TO_SIGMA / np.sqrt(2)
    bar = max(cfg.rise_min, cfg.z_min * sigma)
    ahead = forward_min_median(seg, 3, cfg.startup_return_points)
    judged = steps[: len(seg)] > max(cfg.startup_steps, until)
    both = (before >= bar) & (seg - ahead >= bar) & judged
    first = int(np.argmax(judged[:start])) if judged[:start].any() else None
    return jump | np.nan_to_num(both, nan=False)[:start], first


def forward_min_median(x: np.ndarray, k: int, reach: int) -> np.ndarray:
    """Lowest median of k consecutive points that starts 1..reach points after each point
    (NaN where none fits): the level the series comes back to."""
    n = len(x)
    fwd = forward_median(x, k, min_samples=k)
    out = np.full(n, np.nan)
    for d in range(1, reach + 1):
        if d >= n:
            break
        out[: n - d] = np.fmin(out[: n - d], fwd[d:])
    return out


def after_dip(low: np.ndarray, k: int) -> np.ndarray:
    """True at the k points that follow a far-below (low) point."""
    out = np.zeros(len(low), dtype=bool)
    for d in range(1, min(k, len(low) - 1) + 1):
        out[d:] |= low[:-d]
    return out


def excursions(flagged: np.ndarray, gap: int = GAP_POINTS) -> list[tuple[int, int]]:
    """Runs of flagged points (index ranges, inclusive) allowing short unflagged gaps."""
    idx = np.flatnonzero(flagged)
    if len(idx) == 0:
        return []
    breaks = np.flatnonzero(np.diff(idx) > gap + 1)
    starts = np.concatenate([[idx[0]], idx[breaks + 1]])
    ends = np.concatenate([idx[breaks], [idx[-1]]])
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


@dataclass
class Spikes:
    """Upward spikes of a positive metric such as the gradient norm (near-miss screen)."""

    steps: np.ndarray
    values: np.ndarray
    baseline: np.ndarray  # trailing median of the metric
    ratio: np.ndarray  # value / baseline
    z: np.ndarray


def metric_spikes(
    steps: np.ndarray, values: np.ndarray, ratio_min: float, cfg: DetectConfig, start_step: int
) -> Spikes:
    """Points of a positive metric at least `ratio_min` x and `z_min` sigmas above its trend."""
    ok = np.isfinite(values) & (values > 0)
    st, v = steps[ok], values[ok]
    x = np.log(v) if len(v) else v
    trend = trailing_median(x, cfg.trend_points)
    resid = x - trend
    sigma = robust_sigma(x, resid, cfg.scale_points)
    z = resid / sigma
    hit = np.nan_to_num((resid >= np.log(ratio_min)) & (z >= cfg.z_min), nan=False).astype(bool)
    hit &= st >= start_step
    return Spikes(st[hit], v[hit], np.exp(trend[hit]), np.exp(resid[hit]), z[hit])
