"""Refine one screened excursion on a local window: onset, peak, where the loss settles.

ruptures (KernelCPD, linear kernel = least-squares mean shifts, C implementation)
segments the residual to the pre-spike trend on a window of at most MAX_POINTS points
around the excursion; it never sees the whole series, so refining costs the same at 10k
and at 1M steps. The onset is the start of the elevated stretch that leads to the peak: the
earlier of the first breakpoint of that stretch and the first point, walking back from the
screen's first flag, that is still above the onset threshold. A one-point jump that ruptures
pairs with the point before it (segments hold at least two points) keeps its own step unless
that point stands out of the noise itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.signal import find_peaks

from forensics.detect.config import DetectConfig
from forensics.detect.screen import Screen
from forensics.detect.typing import Trend, fit_trend, window_steps

MAX_POINTS = 256
PRE_POINTS = 30


@dataclass
class Refined:
    onset: int  # index into the screen's points
    peak: int
    peaks: list[int]  # every distinct peak of the excursion (indices), the highest included
    settle_step: int | None  # start of the last segment after the peak
    settle_excess: float | None  # its mean residual to the trend, as a ratio - 1
    breakpoints: list[int]  # steps where ruptures put a change
    trend: Trend


def onset_threshold(sigma: float, cfg: DetectConfig) -> float:
    """A point belongs to the excursion when it is this far (log units) above the trend."""
    return float(max(np.log1p(cfg.tolerance), 3.0 * sigma))


def walk_back(sc: Screen, lo: int, thr: float, limit: int) -> int:
    """Earliest index <= lo such that every point from it to lo is above the trend at lo;
    not into start-up from a later flag."""
    ref = sc.trend[lo] if np.isfinite(sc.trend[lo]) else sc.x[max(lo - 1, 0)]
    floor = sc.burn_in if lo >= sc.burn_in else 0
    j = lo
    while j - 1 >= max(floor, lo - limit) and sc.x[j - 1] - ref >= thr:
        j -= 1
    return j


def _segments(r: np.ndarray, sigma: float) -> list[int]:
    """Breakpoint indices (exclusive ends) of a mean-shift segmentation of r."""
    if len(r) < 6:
        return [len(r)]
    from ruptures import KernelCPD  # imported on first use: it costs ~1 s and most runs are clean

    pen = 4.0 * sigma**2 * np.log(len(r))
    algo = KernelCPD(kernel="linear", min_size=2).fit(r.reshape(-1, 1))
    return [int(b) for b in algo.predict(pen=max(pen, 1e-12))]


def _decimate(a: np.ndarray, factor: int) -> np.ndarray:
    """Block medians: keeps a window of any length to MAX_POINTS points for ruptures."""
    n = len(a) // factor * factor
    head = np.median(a[:n].reshape(-1, factor), axis=1) if n else a[:0]
    return np.concatenate([head, [np.median(a[n:])]]) if n < len(a) else head


def refine(
    sc: Screen,
    lo: int,
    hi: int,
    interval: float,
    cfg: DetectConfig,
    usable: np.ndarray | None = None,
    before: Trend | None = None,
) -> Refined:
    """Onset, peak and settle of the excursion flagged at points lo..hi of the screen;
    `usable` marks the points the pre-spike trend may be fitted on; `before`: the trend
    of the incident before it (fit_trend)."""
    peak = lo + int(np.argmax(sc.x[lo : hi + 1] - np.nan_to_num(sc.trend[lo : hi + 1])))
    sigma = float(sc.sigma[lo])
    thr = onset_threshold(sigma, cfg)
    onset = walk_back(sc, lo, thr, cfg.trend_points)
    trend = fit_trend(
        sc.steps,
        sc.x,
        int(sc.steps[onset]),
        cfg,
        usable,
        log=sc.log_space,
        shifts=sc.shifts,
        before=before,
    )
    startup = onset < sc.burn_in
    if startup:  # segments from the onset on: before it the descent is above a flat trend
        trend = flat_at(trend, int(sc.steps[onset]))
    a = onset if startup else max(sc.burn_in, onset - PRE_POINTS)
    end_step = sc.steps[peak] + window_steps(cfg, interval)
    b = int(np.searchsorted(sc.steps, end_step, side="right"))
    r = sc.x[a:b] - trend.at(sc.steps[a:b])
    factor = max(1, int(np.ceil(len(r) / MAX_POINTS)))
    bks = [
        min(a + bk * factor, b) for bk in _segments(_decimate(r, factor), sigma / np.sqrt(factor))
    ]
    if not startup:
        onset = _segment_onset(sc, r, a, bks, onset, peak, thr)
    settle_step, settle_excess = _settle(sc, r, a, bks, peak)
    steps = [int(sc.steps[k]) for k in bks[:-1]]
    r_fit = sc.x[lo : hi + 1] - trend.at(sc.steps[lo : hi + 1])
    peak = lo + int(np.argmax(r_fit))  # the top against the fitted trend, as typing sees it
    peaks = sub_peaks(sc, lo, hi, trend, cfg.rise_min) or [peak]
    if peak not in peaks:
        peaks = sorted({*peaks, peak})
    return Refined(onset, peak, peaks, settle_step, settle_excess, steps, trend)


def flat_at(trend: Trend, step: int) -> Trend:
    """A start-up spike's pre-spike trend: the fitted level at its onset, held flat. The
    fit's slope on the initial descent, extrapolated, would have the loss keep falling
    steeply, so every later point would read as still elevated (the spike would never
    recover and would swallow whatever comes after it)."""
    return Trend(float(trend.at(step)), 0.0, float(step), trend.n_points, trend.log)


def sub_peaks(sc: Screen, lo: int, hi: int, trend: Trend, rise_min: float) -> list[int]:
    """Distinct peaks inside one excursion: local maxima of the residual to the pre-spike
    trend that stand at least rise_min above it and stand out from their neighbours by a
    prominence of 15% of the excursion's rise, 6 sigma and rise_min / 2 (an echo spike, not
    noise on a top)."""
    r = sc.x[lo : hi + 1] - trend.at(sc.steps[lo : hi + 1])
    if len(r) == 0:
        return []
    sigma = float(sc.sigma[lo])
    prom = max(0.15 * float(r.max()), 6 * sigma, rise_min / 2)
    padded = np.concatenate([[r.min() - 1], r, [r.min() - 1]])
    found, _ = find_peaks(padded, height=rise_min, prominence=prom)
    return [int(i - 1 + lo) for i in found]


def _segment_onset(
    sc: Screen, r: np.ndarray, a: int, bks: list[int], onset: int, peak: int, thr: float
) -> int:
    """Move the onset earlier to the start of an elevated segment run that reaches the peak."""
    starts = [a, *bks[:-1]]
    j = next(i for i, e in enumerate(bks) if peak < e or i == len(bks) - 1)

    def elevated(i: int) -> bool:
        return bool(np.median(r[starts[i] - a : bks[i] - a]) >= thr)

    if not elevated(j):
        return onset
    k = j
    while k > 0 and elevated(k - 1):
        k -= 1
    first = max(starts[k], sc.burn_in)
    if k == j and onset == peak:  # a one-point jump: its segment only pairs it (min_size 2)
        first = _first_raised(r, a, first, onset, thr)
    return min(onset, first)


def _first_raised(r: np.ndarray, a: int, first: int, onset: int, thr: float) -> int:
    """First index from `first` on whose residual stands out of the noise before the stretch
    (its median + 3 robust sigmas, at least the onset threshold). A segment has at least two
    points, so a one-point jump (nothing raised before it by the walk back) shares its
    segment with the point before it: that point belongs to the stretch only if it is
    itself raised (an HF Trainer spike at 115 was dated 114, a noise point). A rise over
    several segments keeps the start of its first one: replay needs the steps leading up."""
    pre = r[max(0, first - a - PRE_POINTS) : max(0, first - a)]
    pre = pre[np.isfinite(pre)]
    bar = thr
    if len(pre) >= 5:
        level = float(np.median(pre))
        bar = max(thr, level + 3.0 * 1.4826 * float(np.median(np.abs(pre - level))))
    k = first
    while k < onset and not r[k - a] >= bar:
        k += 1
    return k


def _settle(
    sc: Screen, r: np.ndarray, a: int, bks: list[int], peak: int
) -> tuple[int | None, float | None]:
    """Start and level (ratio - 1 to the trend) of the last segment, when it follows the peak."""
    starts = [a, *bks[:-1]]
    if starts[-1] <= peak:
        return None, None
    s, e = starts[-1], bks[-1]
    return int(sc.steps[s]), float(np.expm1(np.median(r[s - a : e - a])))
