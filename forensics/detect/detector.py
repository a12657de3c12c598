"""Detection of one run, end to end: screen -> refine -> group -> type -> events ->
features -> cause -> recovery. Pure: RunData in, Detection out (store.py does the DB)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.stats import theilslopes

from forensics.detect import events as ev
from forensics.detect import recurrence
from forensics.detect.classify import PEAK_LR_FRACTION, classify, lr_phase
from forensics.detect.config import DetectConfig
from forensics.detect.coverage import Coverage
from forensics.detect.data import Metric, RunData
from forensics.detect.evidence import explain
from forensics.detect.features import (
    compute,
    finite_median,
    grad_lookback,
    near_trend,
    precursor_len,
    run_context,
)
from forensics.detect.model import Detection, Evidence, Incident, NearMiss
from forensics.detect.quiet import GradientRise, lone_jump, quiet_jumps
from forensics.detect.recovery import Checkpoint, advise, run_cost
from forensics.detect.refine import Refined, refine, sub_peaks
from forensics.detect.rules import Rule
from forensics.detect.screen import (
    Screen,
    centred_median,
    excursions,
    metric_spikes,
    screen_series,
)
from forensics.detect.tails import tail_evidence
from forensics.detect.typing import DIVERGENT, Trend, fit_trend, point_allowance, type_shape
from forensics.detect.unread import unread_metrics, without
from forensics.nonfinite import signed_percent


def screen_loss(
    data: RunData, cfg: DetectConfig, clusters: list[ev.Cluster] | None = None
) -> Screen:
    """The loss's screen; `clusters` (the run's events) tell where the fp16 loss-scale
    search of the first steps ended, through which start-up is judged as the optimizer's
    own start."""
    v = data.loss.values
    ok = np.isfinite(v)
    if ok.any() and np.all(v[ok] > 0):
        ok &= v > 0
    search = ev.startup_end(clusters or [], cfg.startup_steps)
    sc = screen_series(data.loss.steps[ok], v[ok], cfg, search)
    sc.shifts = schedule_shifts(data)
    return sc


def schedule_shifts(data: RunData) -> np.ndarray:
    """Steps where the schedule moves the loss's level: the first logged step of each new
    epoch (the logged `epoch` passes an integer: the model sees its data again) and each
    logged LR drop of 2x or more between two logged points (a step-decay milestone)."""
    out: list[np.ndarray] = []
    for name, shifted in (("epoch", _new_epoch), ("lr", _lr_drop)):
        if data.has(name):
            m = data.aux[name]
            ok = np.isfinite(m.values)
            st, v = m.steps[ok], m.values[ok]
            if len(v) > 1:
                out.append(st[1:][shifted(v[:-1], v[1:])])
    return np.unique(np.concatenate(out)) if out else np.zeros(0, np.int64)


def _new_epoch(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    return np.floor(after) > np.floor(before)


def _lr_drop(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    return (after > 0) & (before >= 2 * after)


def _joins(cur: Incident, sc: Screen, onset: int, cfg: DetectConfig) -> bool:
    """A new excursion is part of `cur`: `cur` diverged, or it is an echo within
    `echo_window` of `cur`'s last peak and `cur` was not a blip already over (see
    `_healed_blip`), or `cur` never recovered inside its window, or, within that window, the
    loss just before the new onset is still above the level `cur` started from (it touched
    its trend and went on above that level: recurring spikes of one instability, as when
    the LR is too high)."""
    if cur.type == DIVERGENT:
        return True
    if onset <= cur.last_peak_step + cfg.echo_window and not _healed_blip(cur, sc, onset, cfg):
        return True
    if onset > cur.shape.window_end:
        return False
    if cur.end_step is None:
        return True
    i = int(np.searchsorted(sc.steps, onset))
    before = sc.x[max(0, i - cfg.smooth_points) : i]
    if len(before) == 0:
        return False
    level = np.log(cur.pre_value) if sc.log_space and cur.pre_value else cur.pre_value or 0.0
    return float(np.median(before) - level) > np.log1p(cur.shape.tolerance)


def _healed_blip(cur: Incident, sc: Screen, onset: int, cfg: DetectConfig) -> bool:
    """`cur` recovered before `onset`, and each of its peaks was one logged point: the next
    point was back within max(tolerance, 3 sigma) of its trend (features.single_point_peaks'
    test). That is a batch's own loss, healed at once: it left the model as it was, so
    nothing ties it to what comes next, however soon. A peak that decayed over several
    points moved the optimizer's state, and a spike in the next `echo_window` steps is the
    same instability coming back (a stale second moment's echo, a too-high LR's recurrence)."""
    if cur.end_step is None or cur.end_step >= onset:
        return False
    thr = near_trend(cur.sigma, cfg)
    for step, _ in cur.peaks:
        i = int(np.searchsorted(sc.steps, step, side="right"))
        if i >= len(sc.steps) or sc.x[i] - cur.trend.at(sc.steps[i]) >= thr:
            return False
    return True


def _search_end(burn_step: int, incidents: list[Incident], gap: float) -> int:
    """Where the fp16 scaler's start-up search may end at the latest: the screen's burn-in
    step, but before any loss spike the start-up screen found. Overflows in the steps that
    lead into such a spike are its evidence, not the search (at a log interval of 16 the
    burn-in is 300+ steps, well past any scaler's search)."""
    early = [i.onset_step - gap for i in incidents if i.onset_step < burn_step]
    return int(min([burn_step, *early]))


def _value(sc: Screen, i: int) -> float:
    return float(np.exp(sc.x[i])) if sc.log_space else float(sc.x[i])


def _trend_points(sc: Screen) -> np.ndarray:
    """Points a pre-spike trend may be fitted on: not start-up, not a candidate, not far
    below the trend."""
    usable = ~sc.flagged & ~sc.low
    usable[: sc.burn_in] = False
    return usable


def loss_incidents(sc: Screen, data: RunData, cfg: DetectConfig) -> list[Incident]:
    """One incident per excursion, echoes and not-yet-recovered follow-ups merged."""
    out: list[Incident] = []
    usable = _trend_points(sc)
    for lo, hi in excursions(sc.flagged):
        if out:  # a later trend is fitted only on what came after the previous incident
            b = int(np.searchsorted(sc.steps, out[-1].span_end, side="right"))
            usable[:b] = False
            if usable[b:lo].sum() < 3:  # no level of its own yet: part of the previous one
                if sc.sharp[lo : hi + 1].any():
                    _extend(out[-1], sc, lo + int(np.argmax(sc.resid[lo : hi + 1])), hi, data, cfg)
                continue
        ref = refine(sc, lo, hi, data.interval, cfg, usable, out[-1].trend if out else None)
        if sc.x[ref.peak] - ref.trend.at(sc.steps[ref.peak]) < cfg.rise_min:
            continue  # not above its own pre-onset trend: the tail of an earlier incident
        if out and _joins(out[-1], sc, int(sc.steps[ref.onset]), cfg):
            if sc.sharp[lo : hi + 1].any():  # else a slow stretch of it, not a new peak
                _extend(out[-1], sc, ref.peak, hi, data, cfg)
            continue
        out.append(_new_incident(sc, ref, lo, data, cfg))
    return out


class _Climb(NamedTuple):
    """A warm-up climb, as indices into the screen's points."""

    m: np.ndarray  # the 9-point centred median of the (log) loss
    i0: int  # end of start-up
    i_peak: int  # the last point at or before the LR's first peak
    i_min: int  # the median's low in the warm-up
    i_top: int  # the median's top, up to half a warm-up after the LR peak
    on: int  # first point where the median is warmup_rise_min above its low
    rise: float  # m[i_top] - m[i_min] (log)
    sigma: float  # noise scale at the low


def warmup_rise(
    sc: Screen, data: RunData, incidents: list[Incident], cfg: DetectConfig
) -> Incident | None:
    """The loss climbing back while the logged LR is still warming up, the grad norm
    climbing with it (DetectConfig.warmup_rise_*): an incident the screen cannot see, as
    each point of it is small. Loss incidents the screen found on the climb are taken out
    of `incidents` and become peaks of it (one instability); None when there is no such
    climb, no logged LR ramp or grad norm, or a divergence / event incident overlaps it."""
    span = _warmup_span(sc, data, cfg)
    climb = _climb(sc, *span, cfg) if span is not None else None
    if climb is None or not _gradient_climbs(sc, data, climb, cfg):
        return None
    return _climb_incident(sc, data, incidents, climb, cfg)


def _warmup_span(sc: Screen, data: RunData, cfg: DetectConfig) -> tuple[int, int] | None:
    """(end of start-up, last point at or before the LR's first peak): the first LR ramp
    from (near) zero, when the LR and grad norm are logged and the loss is positive (the
    climb's log-ratio bars do not apply to a loss that can be <= 0)."""
    if not (data.has("lr") and data.has("grad_norm")) or sc.burn_in >= len(sc.steps):
        return None
    if not sc.log_space:
        return None
    lr = data.aux["lr"]
    ok = np.isfinite(lr.values)
    lr_st, lr_v = lr.steps[ok], lr.values[ok]
    if not len(lr_v) or lr_v.max() <= 0:
        return None
    top = float(lr_v.max())
    first_top = int(np.argmax(lr_v >= PEAK_LR_FRACTION * top))
    if lr_v[: first_top + 1].min() > 0.1 * top:
        return None  # no ramp from (near) zero: a constant LR, or a restart mid-schedule
    i0 = sc.burn_in
    i_peak = int(np.searchsorted(sc.steps, float(lr_st[first_top]), side="right")) - 1
    return (i0, i_peak) if i_peak - i0 >= cfg.warmup_rise_points else None


def _climb(sc: Screen, i0: int, i_peak: int, cfg: DetectConfig) -> _Climb | None:
    """The median loss's climb from its warm-up low, when it rises by warmup_rise_min and
    warmup_rise_z noise scales, and by half of warmup_rise_min already at the LR peak."""
    m = centred_median(sc.x, cfg.smooth_points)
    i_min = i0 + int(np.argmin(m[i0:i_peak]))
    i_end = min(len(m) - 1, i_peak + (i_peak - i0) // 2)
    i_top = i_min + int(np.argmax(m[i_min : i_end + 1]))
    rise = float(m[i_top] - m[i_min])
    sigma = float(sc.sigma[i_min])
    if rise < cfg.warmup_rise_min or rise < cfg.warmup_rise_z * sigma:
        return None
    if m[i_peak] - m[i_min] < cfg.warmup_rise_min / 2:
        return None  # not climbing yet when the LR peaked: a later bump, not this mechanism
    on = i_min + int(np.argmax(m[i_min : i_top + 1] - m[i_min] >= cfg.warmup_rise_min))
    return _Climb(m, i0, i_peak, i_min, i_top, on, rise, sigma)


def _gradient_climbs(sc: Screen, data: RunData, c: _Climb, cfg: DetectConfig) -> bool:
    """The grad norm grows warmup_rise_grad x with the climb, either shape of it: it drifted
    up from before the climb to its top (`_gradient_drifts`), or it moves with the loss
    through the climb (`_gradient_follows_loss`)."""
    return _gradient_drifts(sc, data, c, cfg) or _gradient_follows_loss(sc, data, c, cfg)


def _half(sc: Screen, c: _Climb, cfg: DetectConfig) -> float:
    """Steps either side of the climb's low and top that its gradient tests read."""
    return float(max(cfg.trend_points, (sc.steps[c.i_peak] - sc.steps[c.i0]) / 8))


def _gradient_drifts(sc: Screen, data: RunData, c: _Climb, cfg: DetectConfig) -> bool:
    """The median grad norm at the climb's top is warmup_rise_grad x the median before it.
    Neither window crosses the climb's onset: a short climb would otherwise dilute both
    medians with the other's points."""
    grad, s_on, half = data.aux["grad_norm"], float(sc.steps[c.on]), _half(sc, c, cfg)
    s_min, s_top = float(sc.steps[c.i_min]), float(sc.steps[c.i_top])
    g_lo = finite_median(grad.window(s_min - half, min(s_min + half, s_on - 1)))
    g_hi = finite_median(grad.window(max(s_top - half, s_on), s_top + half))
    if not g_lo or g_hi is None:
        return False
    return g_hi >= cfg.warmup_rise_grad * g_lo


def _gradient_follows_loss(sc: Screen, data: RunData, c: _Climb, cfg: DetectConfig) -> bool:
    """Over the climb's phase (from `_half` before its low to `_half` after its top), the
    log grad norm regressed on the median log-loss (Theil-Sen: robust to the gradient
    spikes the instability throws) grows warmup_rise_grad x over the climb's rise. Every
    point counts: when the gradient jumps 2-3x from step to step (a tiny model at 100x its
    LR), two medians of ~20 points sit within noise of the bar, while the gradient's
    co-movement with the loss is plain."""
    half = _half(sc, c, cfg)
    s_min, s_top = float(sc.steps[c.i_min]), float(sc.steps[c.i_top])
    st, g = data.aux["grad_norm"].window_steps(s_min - half, s_top + half)
    ok = np.isfinite(g) & (g > 0)
    x = np.interp(st[ok], sc.steps, c.m)
    if ok.sum() < cfg.smooth_points or np.ptp(x) <= 0:
        return False
    slope = float(theilslopes(np.log(g[ok]), x).slope)
    return slope * c.rise >= np.log(cfg.warmup_rise_grad)


def _climb_incident(
    sc: Screen, data: RunData, incidents: list[Incident], c: _Climb, cfg: DetectConfig
) -> Incident | None:
    """The climb as one incident, from its onset through its hump (the upper half of the
    climb). Loss incidents on the hump are taken out of `incidents` and become its peaks;
    None when a divergence or an event cluster overlaps it (they say more than the climb)."""
    a, b = _hump(c.m, c.i_top, float(c.m[c.i_min]) + c.rise / 2)
    a = max(a, c.on)
    pk = a + int(np.argmax(sc.x[a : b + 1]))  # its highest loss, as any incident's peak
    onset, hump_end = int(sc.steps[c.on]), int(sc.steps[b])
    inside = [i for i in incidents if i.onset_step <= hump_end and onset <= i.span_end]
    if any(i.type == DIVERGENT or i.origin != "loss" for i in inside):
        return None
    peaks = sorted({(int(sc.steps[pk]), _value(sc, pk)), *(p for i in inside for p in i.peaks)})
    peak_step, peak_value = max(peaks, key=lambda p: p[1])
    for i in inside:
        incidents.remove(i)
    # the flat level of the low; the screen's onset (refined on breakpoints) and its own
    # pre-onset trend when the screen found the climb's start (a spike riding on the climb
    # after its start, or at its top, has its onset there, not the climb's)
    trend = Trend(
        float(c.m[c.i_min]), 0.0, float(sc.steps[c.i_min]), c.i_min - c.i0 + 1, sc.log_space
    )
    sigma = c.sigma
    if inside and min(i.onset_step for i in inside) <= onset:
        onset = min(i.onset_step for i in inside)
        trend, sigma = inside[0].trend, inside[0].sigma
    last = max(p[0] for p in peaks)
    shape = type_shape(
        data.loss, trend, last, sigma, data.interval, cfg, sc.log_space, sc.best_before(onset)
    )
    inc = Incident(
        id=0, metric=data.loss_name, origin="loss", onset_step=onset, peak_step=peak_step,
        peaks=peaks, trend=trend, sigma=sigma, shape=shape,
        pre_value=trend.value_at(onset), peak_value=peak_value, climb=True,
    )  # fmt: skip
    _take_followers(inc, sc, data, incidents, cfg)
    return inc


def _take_followers(
    inc: Incident, sc: Screen, data: RunData, incidents: list[Incident], cfg: DetectConfig
) -> None:
    """Loss incidents that start after the climb's hump but before it recovered become its
    peaks: a spike the climb has not come back from is not an incident of its own beside
    it (a later spike, or any after a climb that never recovers, is left as it is)."""
    for i in sorted(incidents, key=lambda i: i.onset_step):
        if i.onset_step <= inc.onset_step:
            continue
        if i.type == DIVERGENT or inc.end_step is None or i.onset_step >= inc.end_step:
            break
        incidents.remove(i)
        inc.peaks = sorted({*inc.peaks, *i.peaks})
        inc.peak_step, inc.peak_value = max(inc.peaks, key=lambda p: p[1])
        best = sc.best_before(inc.onset_step)
        inc.shape = type_shape(
            data.loss, inc.trend, inc.last_peak_step, inc.sigma, data.interval, cfg,
            sc.log_space, best,
        )  # fmt: skip


def _hump(m: np.ndarray, top: int, level: float) -> tuple[int, int]:
    """The stretch around index `top` where the median `m` stays at or above `level` (the
    upper half of a climb): the climb lasts that long, and a spike riding on it after the
    median's top (the loss is noisiest there) is the climb's, not a later incident."""
    a = b = top
    while a > 0 and m[a - 1] >= level:
        a -= 1
    while b + 1 < len(m) and m[b + 1] >= level:
        b += 1
    return a, b


def _new_incident(sc: Screen, ref: Refined, lo: int, data: RunData, cfg: DetectConfig) -> Incident:
    sigma = float(sc.sigma[lo])
    peak_step, onset = int(sc.steps[ref.peak]), int(sc.steps[ref.onset])
    best = sc.best_before(onset)
    # typed from its last peak, not its highest: a loss back between two peaks is not back
    # for good (a corrupt value at 1565, back at 1566, another at 1568)
    last = max([peak_step, *(int(sc.steps[i]) for i in ref.peaks)])
    shape = type_shape(data.loss, ref.trend, last, sigma, data.interval, cfg, sc.log_space, best)
    return Incident(
        id=0,
        metric=data.loss_name,
        origin="loss",
        onset_step=onset,
        peak_step=peak_step,
        peaks=[(int(sc.steps[i]), _value(sc, i)) for i in ref.peaks],
        trend=ref.trend,
        sigma=sigma,
        shape=shape,
        pre_value=ref.trend.value_at(onset),
        peak_value=_value(sc, ref.peak),
        breakpoints=ref.breakpoints,
        settle_step=ref.settle_step,
    )


def _extend(
    cur: Incident, sc: Screen, peak: int, hi: int, data: RunData, cfg: DetectConfig
) -> None:
    """Add an echo / recurrence to `cur`: its peaks are re-read over the whole incident
    against the incident's own trend, the highest becomes the peak, and it is re-typed."""
    first = int(np.searchsorted(sc.steps, cur.onset_step))
    found = sub_peaks(sc, first, hi, cur.trend, cfg.rise_min)
    cur.peaks = [(int(sc.steps[i]), _value(sc, i)) for i in found] or cur.peaks
    top = int(np.searchsorted(sc.steps, cur.peak_step))
    if sc.x[peak] - cur.trend.at(sc.steps[peak]) > sc.x[top] - cur.trend.at(cur.peak_step):
        cur.peak_step, cur.peak_value = int(sc.steps[peak]), _value(sc, peak)
    best = sc.best_before(cur.onset_step)
    cur.shape = type_shape(
        data.loss, cur.trend, cur.last_peak_step, cur.sigma, data.interval, cfg, sc.log_space, best
    )


def _sigma_at(sc: Screen, step: int) -> float:
    i = min(max(int(np.searchsorted(sc.steps, step)) - 1, 0), len(sc.sigma) - 1)
    return float(sc.sigma[i]) if len(sc.sigma) else 0.01


def _reach(inc: Incident, last_step: int) -> float:
    """Last step an incident owns: a divergent run never came back, so everything after its
    onset (the NaNs it ends in, scaler collapses) is the same incident, not a new one."""
    return float(last_step) if inc.type == DIVERGENT else inc.span_end


def _overlaps(c: ev.Cluster, inc: Incident, gap: float, last_step: int) -> bool:
    return c.first <= _reach(inc, last_step) and c.last >= inc.onset_step - gap


def event_incident(c: ev.Cluster, sc: Screen, data: RunData, cfg: DetectConfig) -> Incident:
    """An incident formed by events alone (non-finite values, absurd gradient, scale collapse)."""
    peak = c.peak_step()
    trend = fit_trend(
        sc.steps, sc.x, c.first, cfg, _trend_points(sc), log=sc.log_space, shifts=sc.shifts
    )
    sigma = _sigma_at(sc, c.first)
    best = sc.best_before(c.first)
    shape = type_shape(data.loss, trend, c.last, sigma, data.interval, cfg, sc.log_space, best)
    kinds = {e.kind for e in c.events}
    inc = Incident(0, data.loss_name, "events", c.first, peak, [], trend, sigma, shape)
    if "nonfinite_loss" in kinds:
        inc.pre_value = trend.value_at(c.first)
        inc.peak_value = float("nan")
    elif kinds & {"absurd_grad", "nonfinite_grad"} and data.has("grad_norm"):
        g = data.aux["grad_norm"]
        inc.metric = "grad_norm"
        pre = g.window(c.first - precursor_len(c.first, cfg), c.first - 1)
        inc.pre_value = float(np.median(pre[np.isfinite(pre)])) if np.isfinite(pre).any() else None
        inc.peak_value = g.at_or_before(peak)
    elif data.has("loss_scale"):
        s = data.aux["loss_scale"]
        inc.metric = "loss_scale"
        inc.pre_value = s.at_or_before(c.first - 1)
        inc.peak_step, inc.peak_value = _lowest(s, c.first, c.last)
    inc.peaks = [(inc.peak_step, inc.peak_value if inc.peak_value is not None else float("nan"))]
    return inc


def _lowest(scale: Metric, first: int, last: int) -> tuple[int, float]:
    """A scale collapse's worst moment: the first step at its lowest scale (the page quotes
    the value at the step it names: 131,072 -> 4096 was reached at the last halving, not at
    the first)."""
    st, v = scale.window_steps(first, last)
    ok = np.isfinite(v)
    if not ok.any():
        return first, float("nan")
    i = int(np.argmin(np.where(ok, v, np.inf)))
    return int(st[i]), float(v[i])


def _mark_nonfinite_peak(inc: Incident, data: RunData) -> None:
    """A loss incident that went non-finite peaks at its first non-finite loss."""
    st, v = data.loss.window_steps(inc.onset_step, inc.span_end)
    bad = ~np.isfinite(v)
    if inc.origin == "loss" and bad.any():
        step = int(st[bad][0])
        inc.peak_step, inc.peak_value = step, float("nan")
        if all(s != step for s, _ in inc.peaks):
            inc.peaks.append((step, float("nan")))
            inc.peaks.sort()


def _quiet_near_miss(inc: Incident, rise: GradientRise, data: RunData) -> NearMiss:
    base = inc.trend.value_at(inc.peak_step)
    value = float(inc.peak_value or 0.0)
    ratio = value / base if base else float("nan")
    g = data.aux["grad_norm"].at_or_before(inc.peak_step)
    jump, lift = signed_percent(ratio - 1, 1), signed_percent(float(np.expm1(rise.rise)))
    detail = (
        f"loss jumped {jump} above its trend and came back with no gradient counterpart "
        f"(grad norm {g:.3g} at the jump; over the jump's steps it rose {lift} "
        f"above its level, as {rise.chance:.1%} of the run's {rise.windows} other gradient "
        "windows do: within its own noise): a heavy-tailed loss point, not a batch spike"
    )
    return NearMiss(inc.peak_step, data.loss_name, value, float(base or 0.0), ratio, detail)


def _skipped_near_miss(c: ev.Cluster, data: RunData) -> NearMiss:
    """A non-finite gradient norm whose update was skipped (events.skipped_update)."""
    step = c.peak_step()
    g = data.aux["grad_norm"]
    ok = g.values[np.isfinite(g.values)]
    base = float(np.median(ok)) if len(ok) else float("nan")
    n = c.count("nonfinite_grad")
    after = data.loss.values[int(np.searchsorted(data.loss.steps, c.last, side="right"))]
    why = (
        "an fp16 loss scaler's overflow step, skipped"
        if data.config.get("precision") == "fp16"
        else "a skipped update, as an fp16 loss scaler skips an overflow (precision not in the "
        "config: in a bf16/fp32 run a NaN guard caught a fault here)"
    )
    detail = (
        f"grad norm non-finite at {n} logged step{'s' if n != 1 else ''} from step {step}, the "
        f"loss finite after it ({after:.4g} next): {why}; not an incident"
    )
    value = float(g.at_or_before(step) or float("nan"))
    return NearMiss(step, "grad_norm", value, base, float("inf"), detail)


def near_misses(
    data: RunData, sc: Screen, incidents: list[Incident], start: int, cfg: DetectConfig
) -> list[NearMiss]:
    """Gradient spikes the loss did not follow (clipping absorbed them), and loss points of
    a spike's size under the noise bar or just under that size (loss_near_misses)."""
    return _loss_near_misses(sc, data, incidents, cfg) + _grad_near_misses(
        data, sc, incidents, start, cfg
    )


NEAR_BAR = 0.75  # a loss point within this share of the spike bar came close to it


def _loss_near_misses(
    sc: Screen, data: RunData, incidents: list[Incident], cfg: DetectConfig
) -> list[NearMiss]:
    """Screened loss points that the point test left just under one of its two bars, outside
    every incident: a spike's size above the trend (rise_min) but NEAR_BAR of its noise bar
    or more, or clear of the noise bar but NEAR_BAR of that size or more. A reader who sees
    one in a figure (a +47% point just after a recovery, a +13% blip at 18σ on the Mixtral
    golden run) learns why it is not an incident. Points further under are ordinary noise."""
    if not sc.log_space:
        return []
    with np.errstate(divide="ignore", invalid="ignore"):
        z = sc.lift / sc.sigma
        noisy = (sc.lift >= cfg.rise_min) & (z >= NEAR_BAR * sc.z_need)
        small = (sc.lift >= NEAR_BAR * cfg.rise_min) & (z >= sc.z_need)
    idx = np.flatnonzero((noisy | small) & ~sc.flagged)  # a NaN compares False
    # a point just under the size right after a flagged or listed one is its excursion's tail
    tail = np.r_[False, (sc.flagged | noisy | small)[:-1]] & ~noisy
    out = []
    for i in idx[idx >= sc.burn_in]:
        step = int(sc.steps[i])
        if tail[i] or any(inc.onset_step <= step <= inc.span_end for inc in incidents):
            continue
        lift = signed_percent(float(np.expm1(sc.lift[i])))
        under = (
            f"under the {sc.z_need[i]:.0f}σ bar for a spike"
            if sc.lift[i] >= cfg.rise_min
            else f"under the {signed_percent(float(np.expm1(cfg.rise_min)))} a spike needs"
        )
        detail = (
            f"loss {lift} over the median of the points before it at "
            f"{z[i]:.1f}σ of this log's noise, {under}"
        )
        value, base = float(np.exp(sc.x[i])), float(np.exp(sc.x[i] - sc.lift[i]))
        out.append(NearMiss(step, data.loss_name, value, base, value / base, detail))
    return out


def _grad_near_misses(
    data: RunData, sc: Screen, incidents: list[Incident], start: int, cfg: DetectConfig
) -> list[NearMiss]:
    if not data.has("grad_norm"):
        return []
    g = data.aux["grad_norm"]
    sp = metric_spikes(g.steps, g.values, cfg.grad_spike_ratio, cfg, start)
    lead = grad_lookback(data, cfg)
    clip = data.config.get("grad_clip")
    out = []
    for step, value, base, ratio in zip(sp.steps, sp.values, sp.baseline, sp.ratio, strict=True):
        if any(i.onset_step - lead <= step <= i.span_end for i in incidents):
            continue
        detail = f"grad norm {ratio:.1f}x its trailing median with no loss spike"
        loss = data.loss.at_or_before(int(step))
        i = min(max(int(np.searchsorted(sc.steps, step, side="right")) - 1, 0), len(sc.steps) - 1)
        if loss and len(sc.steps) and np.isfinite(sc.trend[i]) and sc.log_space and loss > 0:
            off = float(np.exp(np.log(loss) - sc.trend[i]) - 1)
            detail += f" (loss {signed_percent(off, 1)} vs trend)"
        if clip is not None:  # the logged norm is the pre-clip one (HF, Megatron, OLMo)
            acted = float(value) > float(clip)
            detail += (
                f"; above the clip at {clip}: clipping scaled that update down"
                if acted
                else f"; under the clip at {clip}: clipping did not act"
            )
        out.append(
            NearMiss(int(step), "grad_norm", float(value), float(base), float(ratio), detail)
        )
    return out


def detect_data(
    data: RunData,
    rules: list[Rule],
    cfg: DetectConfig | None = None,
    checkpoints: list[Checkpoint] | None = None,
    gpu_hour_cost: float | None = None,
    others: list[recurrence.RunSpikes] | None = None,
    attempts: list[recurrence.RunSpikes] | None = None,
) -> Detection:
    """Find, type, explain and advise on every incident of one run. `others`: the other
    runs of the store (their spikes give the cross-run features); `attempts`: the attempts
    the run went back from (rollbacks.spikes: the rollback_recurrence feature)."""
    cfg = cfg or DetectConfig()
    unread = unread_metrics(data)
    data = without(data, unread)
    notes = [f"{data.run_id}: {u.note}" for u in unread]
    missing = [m for m in data.missing() if m not in {u.metric for u in unread}]
    finite = int(np.isfinite(data.loss.values).sum())
    if finite < 3:
        notes.append(
            f"{data.run_id}: {finite} finite logged loss points: the loss curve is not "
            "screened; only non-finite values, gradient norms and the loss scale are"
        )
    all_events = ev.collect(data, cfg)
    gap = max(cfg.event_gap_steps, 3 * data.interval)
    clusters = ev.cluster(all_events, gap, max(3.0, data.interval))
    sc = screen_loss(data, cfg, clusters)
    burn_step = int(sc.steps[sc.burn_in]) if sc.burn_in < len(sc.steps) else data.last_step
    if finite < 3:  # no loss curve tells where start-up ends: every event counts
        burn_step = -1
    incidents = loss_incidents(sc, data, cfg) if finite >= 3 else []
    climb = warmup_rise(sc, data, incidents, cfg) if finite >= 3 else None
    if climb is not None:
        incidents.append(climb)
    start_end = ev.startup_end(clusters, _search_end(burn_step, incidents, gap))
    skipped: list[NearMiss] = []
    for c in clusters:
        if c.first <= start_end and not c.unexplained_nonfinite():
            continue
        if c.stands_alone(cfg) and not any(_overlaps(c, i, gap, data.last_step) for i in incidents):
            precision = data.config.get("precision")
            if ev.skipped_update(c, data.loss, data.interval, cfg, precision):
                skipped.append(_skipped_near_miss(c, data))
            else:
                incidents.append(event_incident(c, sc, data, cfg))
    incidents.sort(key=lambda i: i.onset_step)
    for inc in incidents:
        lo = inc.onset_step - gap
        hi = _reach(inc, data.last_step)
        inc.events = [e for e in all_events if lo <= e.step <= hi and e.step > start_end]
        inc.reports = ev.report_evidence(data, max(lo, start_end + 1), hi)
        _mark_nonfinite_peak(inc, data)
    quiet = quiet_jumps(incidents, data, sc, burn_step, cfg)
    incidents = [i for i in incidents if all(i is not q for q, _ in quiet)]
    for n, inc in enumerate(incidents, 1):
        inc.id = n
    _explain(
        incidents,
        data,
        sc,
        rules,
        cfg,
        missing,
        checkpoints or [],
        gpu_hour_cost,
        others or [],
        attempts or [],
    )
    for inc in incidents:
        inc.evidence += _history_evidence(inc, data, cfg) + _counter_evidence(inc, data)
    tail_evidence(sc, incidents, [i for i in incidents if lone_jump(i, sc, cfg)], data)
    nm = near_misses(data, sc, incidents, burn_step, cfg) if finite >= 3 else []
    nm += [_quiet_near_miss(i, rise, data) for i, rise in quiet] + skipped
    nm.sort(key=lambda m: m.step)
    det = Detection(data.run_id, incidents, nm, missing, data.last_step, notes, unread=unread)
    det.coverage = _coverage(data, sc, finite, cfg)
    det.cost = run_cost(incidents, data.last_step, gpu_hour_cost)
    if det.coverage.unscreened_points or det.coverage.screened_from_step is None:
        det.notes.append(f"{data.run_id}: {det.coverage.note}")
    return det


def _coverage(data: RunData, sc: Screen, finite: int, cfg: DetectConfig) -> Coverage:
    steps = sc.steps
    screened = finite >= 3 and sc.burn_in < len(steps)
    both = int(steps[sc.both_sides_from]) if sc.both_sides_from is not None else None
    return Coverage(
        metric=data.loss_name,
        points=len(steps),
        first_step=int(steps[0]) if len(steps) else None,
        last_step=int(steps[-1]) if len(steps) else None,
        screened_from_step=int(steps[sc.burn_in]) if screened else None,
        unscreened_points=int(min(sc.burn_in, len(steps))) if screened else len(steps),
        unscreened_to_step=int(steps[sc.burn_in - 1]) if screened and sc.burn_in else None,
        short_log=len(steps) < 4 * cfg.burn_in_points,
        both_sides_from_step=both if screened and sc.burn_in else None,
        spike_rise=float(np.expm1(cfg.rise_min)),
        spike_z=cfg.z_min,
    )


def _history_evidence(inc: Incident, data: RunData, cfg: DetectConfig) -> list[Evidence]:
    """How many logged loss points the verdict rests on, when that is few (a short log)."""
    st = data.loss.steps[np.isfinite(data.loss.values)]
    before = int(np.sum(st < inc.onset_step))
    if before >= cfg.low_history_points:
        return []
    return [
        Evidence(
            "history_points",
            before,
            f"only {before} logged loss points before the onset: the trend and the noise "
            "scale rest on little history, so the size and type of this incident are rough",
        )
    ]


def _counter_evidence(inc: Incident, data: RunData) -> list[Evidence]:
    """A NaN/Inf gradient norm at steps where the framework's skipped / NaN-iteration
    counters read 0: those counters do not count this failure and must not be trusted."""
    if not data.has("grad_norm"):
        return []
    g = data.aux["grad_norm"]
    st, v = g.window_steps(inc.onset_step - 1, inc.span_end)
    bad = st[~np.isfinite(v)]
    if not len(bad):
        return []
    counters = [n for n in ("nan_iters", "skipped_iters") if data.has(n)]
    zero_at = [n for n in counters if all(data.aux[n].at_or_before(int(s)) == 0 for s in bad[:50])]
    if not zero_at:
        return []
    return [
        Evidence(
            "misleading_counter",
            ", ".join(zero_at),
            f"the gradient norm is non-finite at {len(bad)} logged steps (first {int(bad[0])}) "
            f"while {' and '.join(zero_at)} read 0: the framework's counter does not count it",
        )
    ]


def _explain(
    incidents: list[Incident],
    data: RunData,
    sc: Screen,
    rules: list[Rule],
    cfg: DetectConfig,
    missing: list[str],
    checkpoints: list[Checkpoint],
    gpu_hour_cost: float | None,
    others: list[recurrence.RunSpikes],
    attempts: list[recurrence.RunSpikes],
) -> None:
    peaks = [s for i in incidents for s, _ in i.peaks if i.origin == "loss"]
    ctx = run_context(data, peaks, sc.log_space, cfg)
    have = data.evidence_sources()
    tps = recurrence.tokens_per_step(data.config)
    mine = (
        recurrence.RunLoss(data.loss.steps, data.loss.values) if data.loss_name == "loss" else None
    )
    for n, inc in enumerate(incidents):  # in onset order: a feature reads earlier causes
        compute(inc, data, ctx, cfg, incidents[:n])
        if inc.origin == "loss":
            inc.features.update(
                recurrence.cross_features(inc, data.interval, tps, others, loss=mine)
            )
            inc.features["rollback_recurrence"] = recurrence.in_attempts(
                inc, data.interval, attempts
            )
        shape = _shape_evidence(inc, sc.log_space) + inc.reports
        inc.evidence = list(shape)
        classify(inc, rules, cfg, missing)  # the findings table: every rule, fired or not
        inc.evidence = shape
        explain(inc, rules, have, cfg, missing)  # the stated cause, from the hypotheses
        lr_phase(inc, data)
    causes = [i.cause for i in incidents]
    for inc in incidents:
        advise(
            inc,
            data,
            checkpoints,
            causes.count(inc.cause),
            cfg,
            gpu_hour_cost,
            log_space=sc.log_space,
        )


def _shape_evidence(inc: Incident, log_space: bool = True) -> list[Evidence]:
    s = inc.shape
    out = [
        Evidence("type", inc.type, "; ".join(s.notes) or "by the recovery-window test"),
        Evidence("pre_trend", inc.pre_value, "pre-spike trend at the onset (local power law)"),
        Evidence("tolerance", round(s.tolerance, 4), "relative, widened to the noise if larger"),
    ]
    if log_space and inc.origin == "loss" and np.isfinite(inc.sigma):
        # the recovery test's own allowance for the point where the loss is back: a
        # page's "back at step N" can sit this far off the trend
        point = float(np.expm1(point_allowance(float(np.log1p(s.tolerance)), inc.sigma)))
        out.append(
            Evidence(
                "back_point_allowance", round(point, 4),
                "relative: the point called back may sit this far from the trend (2 noise "
                "scales) when the median of the 9 points from it is within the tolerance",
            )
        )  # fmt: skip
    out += [
        Evidence("recovery_window_steps", s.window_steps, "after the last peak"),
        Evidence("settle_excess", s.settle_excess, "level after the spike / trend - 1"),
    ]
    return out
