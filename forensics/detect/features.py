"""Documented incident features: the only names a rule condition may use.

Each feature is a number (or a short string) computed from the run's logged metrics and
config around one incident; None means "not computable from what was logged" (the metric
is missing, or there is too little history). FEATURES (forensics/detect/vocab.py) gives each
one's definition and docs/detection.md repeats them; a test checks that the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from forensics.detect.classify import DECAY_FRACTION
from forensics.detect.config import DetectConfig
from forensics.detect.data import Metric, RunData, logged_lr_top, number
from forensics.detect.model import FeatureValue, Incident
from forensics.detect.schedule import config_lr_frac, schedule_step
from forensics.detect.typing import nonfinite_tail
from forensics.detect.vocab import FEATURES

# The part of v's jump whose decay gives beta2_eff (see _beta2_eff).
BETA2_FIT_FLOOR = 0.25


@dataclass
class RunContext:
    """Run-level numbers shared by every incident's features."""

    initial_loss: float | None
    uniform_loss: float | None  # ln(vocab size): the loss of uniform predictions, in nats
    uniform_source: str | None  # "config" (vocab_size) or "estimate" (DetectConfig)
    absurd_loss: float | None  # no batch of text scores this (_absurd_level)
    peak_lr: float | None
    warmup_end: float | None
    excursion_steps: np.ndarray  # peak step of every loss excursion of the run
    interval: float
    log_space: bool  # the screen's space: log loss, unless some loss is <= 0


def run_context(
    data: RunData, excursion_steps: list[int], log_space: bool, cfg: DetectConfig
) -> RunContext:
    """`log_space`: the screen's (Screen.log_space), which the incidents' trends are in."""
    fin = data.loss.values[np.isfinite(data.loss.values)]
    initial = float(np.median(fin[:5])) if len(fin) else None
    peak_lr, warm = _schedule(data)
    steps = np.asarray(sorted(excursion_steps))
    uniform, source = _uniform_loss(data, initial, cfg)
    absurd = _absurd_level(initial, uniform, cfg)
    return RunContext(
        initial, uniform, source, absurd, peak_lr, warm, steps, data.interval, log_space
    )


def _uniform_loss(
    data: RunData, initial: float | None, cfg: DetectConfig
) -> tuple[float | None, str | None]:
    """ln V, and where it came from. Without vocab_size a page still has to tell a batch of
    random tokens (at ln V) from a rare-token one: the run's initial loss is ln V when it
    trained from scratch, and no common tokenizer puts ln V below ln(min_vocab_size)."""
    vocab = number(data.config.get("vocab_size"))
    if vocab and vocab >= 2:
        return float(np.log(vocab)), "config"
    if initial is None or not np.isfinite(initial) or initial <= 0:
        return None, None
    return max(initial, float(np.log(cfg.min_vocab_size))), "estimate"


def _absurd_level(initial: float | None, uniform: float | None, cfg: DetectConfig) -> float | None:
    """The loss no batch of text scores: absurd_loss_ratio x the initial loss, or
    absurd_uniform_ratio x ln V when that is lower (a fine-tune starts far below ln V, a
    run from scratch at it)."""
    levels = [
        cfg.absurd_loss_ratio * initial if initial else None,
        cfg.absurd_uniform_ratio * uniform if uniform else None,
    ]
    return min((x for x in levels if x is not None), default=None)


def _schedule(data: RunData) -> tuple[float | None, float | None]:
    cfg = data.config
    peak = number(cfg.get("peak_lr"))
    warm = number(cfg.get("warmup_steps"))
    lr = data.logged_lr()
    if lr is not None:
        found = logged_lr_top(lr, 0.98)  # None: the log ends mid-warm-up
        if found is not None:
            top, first = found
            peak = peak or top
            if warm is None and top > 0:
                warm = float(first)
    return peak, warm


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or not np.isfinite(b):
        return None
    return float(a / b)


def finite_median(v: np.ndarray) -> float | None:
    """Median of the finite values (None when there is none)."""
    v = v[np.isfinite(v)]
    return float(np.median(v)) if len(v) else None


def compute(
    inc: Incident,
    data: RunData,
    ctx: RunContext,
    cfg: DetectConfig,
    earlier: list[Incident] | None = None,
) -> None:
    """Fill inc.features (every key of FEATURES) and inc.grad_norm_peak. `earlier` are the
    run's incidents before this one, already classified (for recurrence features)."""
    f: dict[str, FeatureValue] = dict.fromkeys(FEATURES)
    f.update(_loss_shape(inc, data, ctx, cfg))
    f.update(_gradient(inc, data, cfg))
    f.update(_optimizer(inc, data, ctx, cfg))
    f.update(_scaler(inc, data, cfg, ctx.absurd_loss))
    f["lr_vs_earlier_lr_too_high"] = _lr_recurrence(inc, data, earlier or [], cfg)
    f["single_point_peaks"] = _single_point_peaks(inc, data, cfg)
    f["lr_phase"] = _lr_phase(f.get("lr_frac"), f.get("warmup_progress"))
    f["warmup_end_divergence"] = _warmup_end_divergence(f, cfg)
    f["warmup_climb"] = float(inc.climb)
    f["fading_train"] = _fading_train(f, cfg)
    f["late_growth"] = _late_growth(f, cfg, _top_index(inc), _kick_after_first(inc))
    f["batch_train"] = _batch_train(f)
    inc.features = f


def _warmup_end_divergence(f: dict[str, FeatureValue], cfg: DetectConfig) -> float | None:
    """1 for a divergence at its peak LR within warmup_end_span warm-up lengths of the
    start: bigscience's 104B diverged "very closely to the moment where LR warmup stopped".
    It names the LR (lr-too-high) and keeps stale beta2 from claiming the divergence; one
    definition for both. None when the LR phase or the warm-up length is unknown."""
    if f.get("type") != "divergent":
        return 0.0
    lr_frac, progress = f.get("lr_frac"), f.get("warmup_progress")
    if not isinstance(lr_frac, float) or not isinstance(progress, float):
        return None
    return float(lr_frac >= DECAY_FRACTION and progress <= cfg.warmup_end_span)


def _fading_train(f: dict[str, FeatureValue], cfg: DetectConfig) -> float | None:
    """1 for echoes that fade (echo_fade under echo_fade_line) at a held LR (at least
    DECAY_FRACTION of its peak at the onset and at the highest peak), short of diverging:
    one kick dying out. It keeps lr-too-high off the train and lets stale-beta2 have it
    despite a gradient drift; one definition for both. A decaying LR fades its own spikes,
    so the LR must have held. None when the train fades but the LR is unknown."""
    fade = f.get("echo_fade")
    if not isinstance(fade, float) or fade >= cfg.echo_fade_line or f.get("type") == "divergent":
        return 0.0
    lrs = [f.get("lr_frac"), f.get("lr_frac_peak")]
    if any(isinstance(x, float) and x < DECAY_FRACTION for x in lrs):
        return 0.0
    return 1.0 if all(isinstance(x, float) for x in lrs) else None


def _kick_after_first(inc: Incident) -> bool:
    """True when the incident's largest gradient came after its first peak: not the one
    kick before the loss's first response that a stale second moment amplifies."""
    if inc.grad_norm_peak_step is None or not inc.peaks:
        return False
    return inc.grad_norm_peak_step > min(s for s, _ in inc.peaks)


def _top_index(inc: Incident) -> int | None:
    """Which of the incident's peaks (0: the first) rose most against the trend."""
    rises = _finite_rises(inc)
    return max(rises, key=lambda ir: (ir[1], ir[0]))[0] if rises else None


def _late_growth(
    f: dict[str, FeatureValue], cfg: DetectConfig, top: int | None, kick_late: bool
) -> float | None:
    """1 for spikes that grow to the last (an echo, echo_fade at echo_fade_line or more)
    through two echoes at least (the top is the third peak or a later one), short of
    diverging, at the LR's peak (at least DECAY_FRACTION of it at the onset or at the
    highest peak, as lr-too-high reads it), when no one kick explains them: the loss top
    comes more than max(kick_reach_steps, 5 log intervals) after the largest gradient, or
    that gradient came with a later spike, not before the first (`kick_late`).
    A stale second moment fails to damp one kick: the largest gradient, before the loss's
    first response. It is spent within tens of steps (Adam's first moment keeps 0.9^50 =
    0.5% of it after 50), its echo at most once larger than its first response. Spikes
    that keep growing through echo after echo long after it, or each with a larger
    gradient of its own, at the peak LR, are the LR holding the model at its edge. Names
    lr-too-high and keeps stale-beta2 off; one definition for both. None when the
    gradient norm or the LR is not known."""
    lead, echoes, fade = f.get("grad_lead"), f.get("echo_count"), f.get("echo_fade")
    if not isinstance(lead, float):
        return None
    if not isinstance(echoes, float) or echoes < 1 or f.get("type") == "divergent":
        return 0.0
    if top is None or top < 2:
        return 0.0
    if not isinstance(fade, float) or fade < cfg.echo_fade_line:
        return 0.0
    interval = f.get("log_interval")
    reach = max(float(cfg.kick_reach_steps), 5 * (interval if isinstance(interval, float) else 1))
    if lead <= reach and not kick_late:
        return 0.0
    lrs = [x for x in (f.get("lr_frac"), f.get("lr_frac_peak")) if isinstance(x, float)]
    if not lrs:
        return None
    return float(max(lrs) >= DECAY_FRACTION)


def _batch_train(f: dict[str, FeatureValue]) -> float | None:
    """1 for a train of peaks whose first rose in one logged step and whose largest left
    with its batch (heal_share at least BATCH_HEAL), the loss logged every step, short of
    diverging: batches, each its own spike. A second moment too stale to damp a giant
    gradient does its damage after the batch, in the updates: the loss climbs over several
    steps and stays up; a batch's own loss is gone at the next batches. None when the loss
    is logged every few steps (a step's rise and fall hide inside a window)."""
    echoes, rise, heal = f.get("echo_count"), f.get("rise_steps"), f.get("heal_share")
    if not isinstance(echoes, float) or echoes < 1 or f.get("type") == "divergent":
        return 0.0
    interval = f.get("log_interval")
    if not isinstance(interval, float) or interval > 1:
        return None
    if not isinstance(rise, float) or not isinstance(heal, float):
        return None
    return float(rise == 0 and heal >= BATCH_HEAL)


# Share of the rise a batch's own loss gives back within HEAL_POINTS logged points.
BATCH_HEAL = 0.5


def _lr_phase(lr_frac: FeatureValue, warmup_progress: FeatureValue) -> str | None:
    """Warm-up before the schedule's peak, `peak` within 10% of the peak LR, else decay."""
    if isinstance(warmup_progress, float) and warmup_progress < 0.98:
        return "warmup"
    if isinstance(lr_frac, float):
        return "peak" if lr_frac >= DECAY_FRACTION else "decay"
    return "peak" if isinstance(warmup_progress, float) and warmup_progress <= 1.1 else None


def near_trend(sigma: float, cfg: DetectConfig) -> float:
    """How far (log) above its trend a point may be and still be back on it: the tolerance,
    or 3 noise scales when the noise is wider."""
    return float(max(np.log1p(cfg.tolerance), 3 * sigma))


def spike_band(sigma: float, cfg: DetectConfig) -> float:
    """How far (log) above its trend a point must be to be a spike itself: rise_min, or
    z_min noise scales when the noise is wider (the screen's point test)."""
    return float(max(cfg.rise_min, cfg.z_min * sigma))


def _single_point_peaks(inc: Incident, data: RunData, cfg: DetectConfig) -> float | None:
    """Share of peaks that are one logged point between two points near the trend: the
    signature of a batch whose own loss was high, each peak healed at the next point."""
    st, v = data.loss.steps, data.loss.values
    thr = near_trend(inc.sigma, cfg)
    finite = [s for s, val in inc.peaks if val is not None and np.isfinite(val)]
    if not finite:
        return None
    ones = 0
    for step in finite:
        i = int(np.searchsorted(st, step))
        if i == 0 or i + 1 >= len(st):
            continue
        near = [_log_resid(inc, int(st[j]), float(v[j])) for j in (i - 1, i + 1)]
        ones += all(r is not None and np.isfinite(r) and r < thr for r in near)
    return ones / len(finite)


def _lr_recurrence(
    inc: Incident, data: RunData, earlier: list[Incident], cfg: DetectConfig
) -> float | None:
    """A too-high LR makes spikes recur while the LR stays where it was: the LR now relative
    to the highest LR at which an earlier incident within recurrence_steps was attributed to
    lr_too_high. Compared with the highest, so that a chain of recurrences cannot carry the
    cause down a decaying schedule one small step at a time."""
    if not data.has("lr"):
        return None
    lr = data.aux["lr"]
    prev = [
        lr.at_or_before(e.onset_step)
        for e in earlier
        if e.cause == "lr_too_high"
        and 0 <= inc.onset_step - e.last_peak_step <= cfg.recurrence_steps
    ]
    top = max((p for p in prev if p is not None and np.isfinite(p)), default=None)
    return _ratio(lr.at_or_before(inc.onset_step), top)


def _loss_shape(
    inc: Incident, data: RunData, ctx: RunContext, cfg: DetectConfig
) -> dict[str, FeatureValue]:
    peaks = [s for s, _ in inc.peaks]
    span_end = inc.span_end
    seg = data.loss.window(inc.onset_step, span_end)
    f: dict[str, FeatureValue] = {
        "rise": _rise(inc),
        "rise_steps": float(min(peaks, default=inc.peak_step) - inc.onset_step),  # vocab.py
        "n_peaks": float(len(peaks)),
        "echo_count": float(len(peaks) - 1),
        "first_echo_gap": float(peaks[1] - peaks[0]) if len(peaks) > 1 else None,
        "echo_fade": _echo_fade(inc),
        # a ratio to a level means something only for a positive loss (a cross-entropy)
        "peak_vs_initial": _ratio(inc.peak_value, ctx.initial_loss) if ctx.log_space else None,
        "peak_vs_uniform": _ratio(inc.peak_value, ctx.uniform_loss) if ctx.log_space else None,
        "uniform_loss": ctx.uniform_loss,
        "uniform_source": ctx.uniform_source,
        "settle_excess": inc.shape.settle_excess,
        "recovery_steps": (
            float(inc.end_step - inc.last_peak_step) if inc.end_step is not None else None
        ),
        "type": inc.type,
        "window_closed": float(inc.shape.window_closed),
        "nonfinite_loss": float(np.sum(~np.isfinite(seg))),
        "origin": inc.origin,
        "log_interval": local_interval(data.loss.steps, inc.onset_step),
    }
    f["random_level"] = _random_level(f, cfg)
    f.update(_dip_and_jump(inc, data, cfg))
    f.update(_plateau(inc, data))
    f["recurrence"] = float(
        np.sum(np.abs(ctx.excursion_steps - inc.onset_step) <= cfg.recurrence_steps)
        - np.sum((ctx.excursion_steps >= inc.onset_step) & (ctx.excursion_steps <= span_end))
    )
    f["spikes_in_run"] = float(len(ctx.excursion_steps))
    f["isolated_nonfinite"] = _isolated(inc, data, cfg)
    f["transient_bad"] = _transient(inc, data, cfg, ctx.absurd_loss)
    return f


def _echo_fade(inc: Incident) -> float | None:
    """Last peak's rise over the largest one's. One disturbance (a batch's giant gradient
    that a stale second moment keeps acting on) rings and dies out: its echoes fade. A
    setting the run cannot sustain (an LR too high for its curvature) kicks again and
    harder: its spikes grow until it diverges or the LR comes down."""
    finite = [r for _, r in _finite_rises(inc)]
    if len(finite) < 2 or max(finite) <= 0:
        return None
    return float(np.clip(finite[-1] / max(finite), 0, 1))


def _finite_rises(inc: Incident) -> list[tuple[int, float]]:
    """(index, log rise against the trend) of each peak whose rise is finite."""
    rises = [_log_resid(inc, s, v) for s, v in inc.peaks]
    return [(i, float(r)) for i, r in enumerate(rises) if r is not None and np.isfinite(r)]


def _random_level(f: dict[str, FeatureValue], cfg: DetectConfig) -> float | None:
    """1 when the peak sits at the loss of random tokens, far above its trend (config)."""
    u, rise = f["peak_vs_uniform"], f["rise"]
    if not isinstance(u, float) or not isinstance(rise, float):
        return None
    band = cfg.random_level_low <= u <= cfg.random_level_high
    return float(band and rise >= cfg.random_level_rise)


def _rise(inc: Incident) -> float | None:
    """The trend is read in the screen's own space (pre_value is): a log-space reading of a
    linear trend would be exp(loss)."""
    if inc.peak_value is None or inc.pre_value is None or not inc.trend.log:
        return None  # a rise as a share of the trend needs a positive loss
    if not np.isfinite(inc.peak_value):
        return float("inf")
    r = _ratio(inc.peak_value, inc.trend.value_at(inc.peak_step))
    return None if r is None else r - 1


def _dip_and_jump(inc: Incident, data: RunData, cfg: DetectConfig) -> dict[str, FeatureValue]:
    """pre_dip(_z), jump_share, next_excess, peak_drop, heal_share, single_point: the shape
    around the first rise."""
    out = _pre_dip(inc, data, cfg)
    peak_r = _log_resid(inc, inc.peak_step, inc.peak_value)
    onset_r = _log_resid(inc, inc.onset_step, data.loss.at_or_before(inc.onset_step))
    if peak_r and onset_r is not None and np.isfinite(peak_r):
        out["jump_share"] = float(np.clip(onset_r / peak_r, 0, 1))
    st = data.loss.steps
    after = [
        _log_resid(inc, int(s), data.loss.at_or_before(int(s)))
        for s in st[st > inc.peak_step][:HEAL_POINTS]
    ]
    back = after[0] if after else None
    if back is not None and np.isfinite(back):
        out["next_excess"] = float(np.expm1(back)) if inc.trend.log else None
        if peak_r and np.isfinite(peak_r):
            out["peak_drop"] = float(np.clip(1 - back / peak_r, 0, 1))
    heal = _heal_share(after, peak_r)
    if heal is not None:
        out["heal_share"] = heal
    thr = near_trend(inc.sigma, cfg)
    one = inc.onset_step == inc.peak_step and back is not None and back < thr
    out["single_point"] = float(one)
    return out


# A batch's own loss is gone when the next batches are read (one logged point later, two
# when the batch straddles a logging window or the next batch is bad too).
HEAL_POINTS = 2


def _heal_share(after: list[float | None], peak_r: float | None) -> float | None:
    """Share of the rise (log) gone at the lower of the HEAL_POINTS logged points after the
    peak (`after`: their log residuals). A batch's spike is its own loss, gone with it; a
    rise the next batches still carry (most of it) is the model's state: a damaging update,
    whatever caused it."""
    if not peak_r or not np.isfinite(peak_r) or peak_r <= 0 or not after:
        return None
    finite = [b for b in after if b is not None and np.isfinite(b)]
    if len(finite) < len(after):
        return None  # a non-finite point after the peak: no healing to measure
    return float(np.clip(1 - min(finite) / peak_r, 0, 1))


def _pre_dip(inc: Incident, data: RunData, cfg: DetectConfig) -> dict[str, FeatureValue]:
    """The lowest point before the highest peak: a degenerate batch can come just before the
    onset, or start the incident (its first batches high, then far below trend)."""
    st, v = data.loss.steps, data.loss.values
    i_on = int(np.searchsorted(st, inc.onset_step))
    lo = max(0, i_on - cfg.dip_lookback_points)
    hi = max(i_on, int(np.searchsorted(st, inc.peak_step)))
    pre_st, pre_v = st[lo:hi], v[lo:hi]
    res = [inc.trend.resid(float(t), float(x)) for t, x in zip(pre_st, pre_v, strict=True)]
    resid = np.array([r for r in res if r is not None and np.isfinite(r)])
    if not len(resid):
        return {}
    # a share below the trend only means something for a positive loss (log space)
    dip = float(np.expm1(resid.min())) if inc.trend.log else None
    return {"pre_dip": dip, "pre_dip_z": float(resid.min() / inc.sigma)}


PLATEAU_HIGH, PLATEAU_LOW = 0.85, 0.25  # shares of the peak's rise (log) for _plateau
# A flat top is entered and left within PLATEAU_EDGES logged points, or held for
# PLATEAU_HELD points and left by a step of PLATEAU_EXIT of the rise in one point: the bad
# batches ended while the damage they did decays (a damaged model's own top decays by under
# a quarter of its rise per point; over a coarse log interval a two-point top can lose more).
PLATEAU_EDGES, PLATEAU_HELD, PLATEAU_EXIT = 2, 3, 0.3


def _plateau(inc: Incident, data: RunData) -> dict[str, FeatureValue]:
    """plateau_points, plateau_edges, plateau_exit, flat_top: a one-peak rise that holds a
    flat top (>= 85% of its height, log) for plateau_points consecutive logged points,
    entered from under 25% and left to under 25% within plateau_edges points each way, and
    plateau_exit of the rise lost at the first point after it. A loss that steps up to a
    level, holds it and steps back down is the batches' own loss while they lasted (a shard
    the model cannot predict); a damaged model climbs and decays over many steps instead,
    and a decay sampled every few steps can put two points near 60% but not two near the
    top."""
    peak_r = _log_resid(inc, inc.peak_step, inc.peak_value)
    if peak_r is None or not np.isfinite(peak_r) or peak_r <= 0 or len(inc.peaks) > 1:
        return {}
    st, v = data.loss.steps, data.loss.values
    i0 = int(np.searchsorted(st, inc.onset_step))
    i1 = int(np.searchsorted(st, inc.span_end, side="right"))
    idx = np.arange(max(0, i0 - 3), min(len(st), i1 + 1))
    x = v[idx]
    if not len(x) or not np.all(np.isfinite(x) & ((x > 0) | (not inc.trend.log))):
        return {}
    r = np.array([_log_resid(inc, int(t), float(y)) for t, y in zip(st[idx], x, strict=True)])
    r = r / peak_r
    high = r >= PLATEAU_HIGH
    f = int(np.argmax(high))
    k = int(np.argmin(high[f:])) if not high[f:].all() else len(high) - f
    before = np.flatnonzero(r[:f] < PLATEAU_LOW)
    after = np.flatnonzero(r[f + k :] < PLATEAU_LOW)
    out: dict[str, FeatureValue] = {"plateau_points": float(k)}
    exit_drop = float(r[f + k - 1] - r[f + k]) if f + k < len(r) else None
    edges = max(f - int(before[-1]), int(after[0]) + 1) if len(before) and len(after) else None
    if exit_drop is not None:
        out["plateau_exit"] = exit_drop
    if edges is not None:
        out["plateau_edges"] = float(edges)
    stepped = k >= 2 and edges is not None and edges <= PLATEAU_EDGES
    held = k >= PLATEAU_HELD and exit_drop is not None and exit_drop >= PLATEAU_EXIT
    out["flat_top"] = float(stepped or held)
    return out


def top_step(inc: Incident, data: RunData) -> int:
    """First step from the onset where the loss reaches 80% of the incident's rise (in log):
    the peak as a user reads it, steadier than the argmax of a broad, noisy top."""
    st, v = data.loss.window_steps(inc.onset_step, inc.peak_step)
    ok = np.isfinite(v) & ((v > 0) | (not inc.trend.log))
    peak_r = _log_resid(inc, inc.peak_step, inc.peak_value)
    if not ok.any() or peak_r is None or not np.isfinite(peak_r):
        return inc.peak_step
    r = np.array([_log_resid(inc, int(t), float(y)) for t, y in zip(st[ok], v[ok], strict=True)])
    return int(st[ok][int(np.argmax(r >= 0.8 * peak_r))])


def _log_resid(inc: Incident, step: int, value: float | None) -> float | None:
    """A value's height over the incident's trend in the screen's space (log loss; the loss
    as logged when some value is <= 0)."""
    return None if value is None else inc.trend.resid(step, value)


def _isolated(inc: Incident, data: RunData, cfg: DetectConfig) -> float:
    """One bad value (non-finite loss/grad or absurd grad) with clean points on both sides:
    the 3 logged losses before and after it are finite, none is itself a spike or a dip
    (rise_min and z_min sigmas, the screen's test), and the median of the 3 after is back
    near the trend (no lasting effect). Each point within 3 sigma would be a noise test:
    with 6 heavy-tailed points one in a dozen faults would fail it. A finite loss peak of
    the incident beyond those points is a rise the bad value does not explain (an fp16
    overflow's inf gradient norm, the loss up tens of steps later): not isolated."""
    bad = {
        e.step for e in inc.events if e.kind in ("nonfinite_loss", "nonfinite_grad", "absurd_grad")
    }
    if len(bad) != 1:
        return 0.0
    step = bad.pop()
    st, v = data.loss.steps, data.loss.values
    i, j = np.searchsorted(st, step, side="left"), np.searchsorted(st, step, side="right")
    idx = np.r_[max(0, i - 3) : i, j : min(len(st), j + 3)]
    if i == 0 or j >= len(st):
        return 0.0
    lo, hi = st[idx[0]], st[idx[-1]]
    if any(not lo <= s <= hi for s, val in inc.peaks if val is not None and np.isfinite(val)):
        return 0.0
    x = v[idx]
    if not np.all(np.isfinite(x) & (x > 0)):
        return 0.0
    r = np.log(x) - inc.trend.at(st[idx])
    calm = np.abs(r) < spike_band(inc.sigma, cfg)
    after = r[idx >= j]
    thr = near_trend(inc.sigma, cfg)
    return float(bool(np.all(calm) and len(after) and abs(float(np.median(after))) < thr))


def _transient(inc: Incident, data: RunData, cfg: DetectConfig, absurd: float | None) -> float:
    """How many bad values (non-finite loss or gradient norm, absurd gradient, a loss at
    the absurd level or more: _absurd_level) the incident is made of, when they are
    1 to transient_max within a short span and every other logged loss of the incident and
    3 points on each side stays under the trend's spike band, back on the trend or under it
    (or at the level of the point before them) after: the values were corrupted, not the
    model, which an applied NaN or absurd update would have carried into every later loss.
    0 otherwise.
    Bad values just past the incident's end belong to the same burst. Beside a bad value, a
    loss absurd_trend_ratio x the trend or more is one too: a writer that averages its
    logging window (the HF Trainer, Megatron) dilutes the next bad step into it. Only rises
    are tested: a non-finite loss that HF's logging_nan_inf_filter replaced reads as a dip."""
    st, v = data.loss.steps, data.loss.values
    with np.errstate(invalid="ignore", over="ignore"):
        sure = _bad_loss(v, absurd)
        wild = sure | (v >= cfg.absurd_trend_ratio * np.exp(inc.trend.at(st)))
    kinds = ("nonfinite_loss", "nonfinite_grad", "absurd_grad")
    bad = {e.step for e in inc.events if e.kind in kinds}
    bad |= {int(s) for s in st[sure & (st >= inc.onset_step) & (st <= inc.span_end)]}
    if not bad:
        return 0.0
    for _ in range(cfg.transient_max):  # the burst: wild values next to it join it
        i = int(np.searchsorted(st, min(*bad, inc.onset_step), side="left"))
        j = int(np.searchsorted(st, max(*bad, inc.span_end), side="right"))
        idx = np.arange(max(0, i - 3), min(len(st), j + 3))
        more = {int(s) for s in st[idx][wild[idx]]} - bad
        if not more:
            break
        bad |= more
    if not 1 <= len(bad) <= cfg.transient_max:
        return 0.0
    first, last = min(bad), max(bad)
    if last - first > max(cfg.transient_span_steps, 4 * data.interval):
        return 0.0
    if i == 0 or j >= len(st) or more:
        return 0.0  # at an end of the log, or wild values beyond transient_max reach
    ok = ~np.isin(st[idx], list(bad))
    return float(len(bad)) if _calm_around(inc, st[idx][ok], v[idx][ok], first, last, cfg) else 0.0


def _calm_around(
    inc: Incident, st: np.ndarray, v: np.ndarray, first: int, last: int, cfg: DetectConfig
) -> bool:
    """The losses around and between a burst of bad values (given without them) stay under
    the spike band and are back after it: on the trend or below it, or at the level of the
    point before them. Only a rise is damage: a model an applied NaN or absurd update had
    hurt would score higher, never lower, and a loss that stepped down there (an epoch
    boundary, an LR milestone) was not moved by the bad values."""
    if not len(v) or not np.all(v > 0):
        return False
    r = np.log(v) - inc.trend.at(st)
    after = r[st > last][:3]
    before = r[st < first]
    thr = near_trend(inc.sigma, cfg)
    if not np.all(r < spike_band(inc.sigma, cfg)) or not len(after):
        return False
    level = float(np.median(after))
    # back on the trend (or under it), or at the level of the point just before the bad
    # values, where the trend lags a step in the curve (an epoch boundary, an LR milestone):
    # they did not move the model
    return level < thr or (len(before) > 0 and abs(level - float(before[-1])) < thr)


def local_interval(steps: np.ndarray, onset: int, points: int = 10) -> float:
    """The loss log's step gap around the onset (the median of `points` gaps either side):
    a run that logged every step and then every 20 (or resumed with another logging_steps)
    shows an incident at its spacing there, not at the run's most common one."""
    i = int(np.searchsorted(steps, onset))
    near = steps[max(0, i - points) : i + points + 1]
    return float(max(1.0, np.median(np.diff(near)))) if len(near) > 1 else 1.0


def precursor_len(onset: int, cfg: DetectConfig) -> float:
    """The precursor window: precursor_steps, but at most half the history before an early
    onset (a spike at step 300 has 150 steps of precursor, not a window before step 0)."""
    return float(min(cfg.precursor_steps, max(40.0, onset / 2)))


def _precursor(m: Metric, onset: int, cfg: DetectConfig) -> tuple[np.ndarray, np.ndarray]:
    return m.window_steps(onset - precursor_len(onset, cfg), onset - 1)


def grad_lookback(data: RunData, cfg: DetectConfig) -> float:
    """Steps before an onset that still belong to the incident's gradient (config)."""
    return float(max(cfg.grad_lookback, data.interval))


def _gradient(inc: Incident, data: RunData, cfg: DetectConfig) -> dict[str, FeatureValue]:
    out: dict[str, FeatureValue] = {"grad_clip": number(data.config.get("grad_clip"))}
    lead = grad_lookback(data, cfg)
    if data.has("grad_norm"):
        g = data.aux["grad_norm"]
        st, v = g.window_steps(inc.onset_step - lead, inc.last_peak_step)
        base = finite_median(_precursor(g, inc.onset_step, cfg)[1])
        out["nonfinite_grad"] = float(np.sum(~np.isfinite(g.window(inc.onset_step, inc.span_end))))
        if len(v):
            worst = int(np.argmax(np.where(np.isfinite(v), v, np.inf)))
            inc.grad_norm_peak = float(v[worst])
            inc.grad_norm_peak_step = int(st[worst])
            inc.grad_norm_baseline = base
            out["grad_ratio"] = (
                _ratio(float(v[worst]), base) if np.isfinite(v[worst]) else float("inf")
            )
            out["grad_lead"] = float(top_step(inc, data) - st[worst])
            out["grad_afterglow"] = _afterglow(g, int(st[worst]), base, data.interval, cfg)
        signs = _overflow_signs(inc, data, g)
        out.update(_overflows(inc, signs))
        start = _cascade_start(inc, data, signs)
        # three logged points in each quarter of the window at least: an early onset in a
        # sparse log gets sixteen intervals (as far back as the log goes), not half its history
        length = precursor_len(start, cfg)
        if len(g.steps):
            length = max(length, min(16.0 * data.interval, float(start - g.steps[0])))
        out["grad_drift"] = _drift_ratio(g, start, length)
        # the same window, gap steps earlier: shrinking it again would leave too few points
        # to say whether a drift was there
        gap = max(cfg.drift_gap_steps, 3 * data.interval)
        out["grad_drift_early"] = _drift_ratio(g, int(start - gap), length)
    if data.has("param_norm"):
        out["param_drift"] = _param_drift(data.aux["param_norm"], inc.onset_step, cfg)
    if data.has("update_norm"):
        u = data.aux["update_norm"]
        out["update_ratio"] = _ratio(
            _max(u.window(inc.onset_step - lead, inc.span_end)),
            finite_median(_precursor(u, inc.onset_step, cfg)[1]),
        )
    return out


def _afterglow(
    g: Metric, kick: int, base: float | None, interval: float, cfg: DetectConfig
) -> float | None:
    """Median grad norm over the logged points more than afterglow_skip steps after the
    largest gradient, over max(afterglow_steps, 2 log intervals), / the precursor's median.
    A rare-token batch's gradient is its own: the next batches' are back at the median (our
    simulator's rare_tokens sample: 14.4 at the batch, the 20 steps from 4 on 1.07x).
    Updates a stale second moment amplified moved the model, whose gradients stay up while
    it returns (its stale_beta2 sample: 3.7 at the kick, 2.3 and 2.1 eight and twelve steps
    on, the 20 steps 1.4x). None with fewer than 2 finite points there."""
    lo = kick + cfg.afterglow_skip
    _, v = g.window_steps(lo + 0.5, lo + max(cfg.afterglow_steps, 2 * interval))
    v = v[np.isfinite(v)]
    return _ratio(float(np.median(v)), base) if len(v) >= 2 else None


def _max(v: np.ndarray) -> float | None:
    v = v[np.isfinite(v)]
    return float(v.max()) if len(v) else None


def _drift_ratio(m: Metric, onset: int, p: float) -> float | None:
    """Median of the last quarter of the `p` steps before `onset` over the lowest quarter
    median: a rise at the end of the window, not hidden by the norm's decline earlier in
    training."""
    st, v = m.window_steps(onset - p, onset - 1)
    ok = np.isfinite(v)
    st, v = st[ok], v[ok]
    edges = onset - p + p / 4 * np.arange(5)
    quarters = [v[(st >= lo) & (st < hi)] for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    if any(len(x) < 3 for x in quarters):
        return None
    return _ratio(float(np.median(quarters[-1])), min(float(np.median(x)) for x in quarters))


def _param_drift(m: Metric, onset: int, cfg: DetectConfig) -> float | None:
    p = precursor_len(onset, cfg)
    now = _growth(m, onset - p, onset - 1)
    before = _growth(m, onset - 2 * p, onset - p - 1)
    return None if now is None or before is None else now - before


def _growth(m: Metric, lo: float, hi: float) -> float | None:
    st, v = m.window_steps(lo, hi)
    ok = np.isfinite(v)
    if ok.sum() < 4:
        return None
    st, v = st[ok], v[ok]
    n = max(1, len(v) // 4)
    return _ratio(float(np.median(v[-n:])), float(np.median(v[:n]))) - 1.0  # type: ignore[operator]


def _optimizer(
    inc: Incident, data: RunData, ctx: RunContext, cfg: DetectConfig
) -> dict[str, FeatureValue]:
    out: dict[str, FeatureValue] = {
        "beta2": number(data.config.get("beta2")),
        "precision": _precision(data.config.get("precision")),
        "warmup_progress": _ratio(float(inc.onset_step), ctx.warmup_end),
    }
    if data.lr_covers(inc.onset_step):
        out["lr_frac"] = _ratio(data.aux["lr"].at_or_before(inc.onset_step), ctx.peak_lr)
        # a rise that spans the end of warm-up: the LR it peaked under
        out["lr_frac_peak"] = _ratio(data.aux["lr"].at_or_before(inc.peak_step), ctx.peak_lr)
        out["lr_source"] = "log"
    else:
        out["lr_frac"] = config_lr_frac(schedule_step(data, inc.onset_step), data.config)
        out["lr_frac_peak"] = config_lr_frac(schedule_step(data, inc.peak_step), data.config)
        out["lr_source"] = "config" if out["lr_frac"] is not None else None
    if data.has("adam_v_mean"):
        out.update(_beta2_eff(data.aux["adam_v_mean"], inc, cfg))
    return out


def _precision(v: object) -> str | None:
    if v is None:
        return None
    s = str(v).lower()
    for name in ("fp16", "bf16", "fp32"):
        if name in s or (name == "fp16" and s in ("float16", "half")):
            return name
    return {"bfloat16": "bf16", "float32": "fp32", "32": "fp32", "16": "fp16"}.get(s)


def _beta2_eff(v: Metric, inc: Incident, cfg: DetectConfig) -> dict[str, FeatureValue]:
    """After a large gradient, v (a smooth average over every parameter) jumps and decays as
    beta2**k back towards its own trend: the slope of log(v - trend) per step gives beta2.
    The trend is log v's straight line over the quarter precursor window before the onset
    (early in training v is still falling, and ignoring that would bias beta2 low). Only
    the decay down to BETA2_FIT_FLOOR of the jump is fitted: further on the excess is a
    small difference of v and an extrapolated line, and the line's error (a few % after
    hundreds of steps) flattens the slope, which reads as a stale beta2 >= 0.999."""
    pst, pv = v.window_steps(
        inc.onset_step - precursor_len(inc.onset_step, cfg) / 4, inc.onset_step - 1
    )
    ok = np.isfinite(pv)
    if ok.sum() < 2:
        return {}
    pos = ok & (pv > 0)
    if pos.sum() < 2:
        return {}
    line = np.polyfit(pst[pos].astype(float), np.log(pv[pos]), 1)
    lead = max(3.0, inc.shape.window_steps / 50)
    st, val = v.window_steps(inc.onset_step - lead, inc.shape.window_end)
    fin = np.isfinite(val)
    st, val = st[fin], val[fin]
    base = np.exp(np.polyval(line, st.astype(float)))
    if len(val) == 0:
        return {}
    near = st <= inc.last_peak_step + 2 * lead  # v jumps with the big gradient, not later
    if not near.any():
        return {}
    top = int(np.argmax(np.where(near, val / base, -np.inf)))
    out: dict[str, FeatureValue] = {"v_jump": float(val[top] / base[top])}
    excess = (val - base)[top:]
    keep = excess > BETA2_FIT_FLOOR * excess[0]
    stop = int(np.argmin(keep)) if not keep.all() else len(keep)
    if val[top] / base[top] >= 1.05 and stop >= 3:
        slope = np.polyfit(st[top : top + stop].astype(float), np.log(excess[:stop]), 1)[0]
        out["beta2_eff"] = float(np.clip(np.exp(slope), 0.0, 0.99999))
    return out


def _overflow_signs(inc: Incident, data: RunData, g: Metric) -> np.ndarray:
    """Steps of non-finite gradient norms with a finite loss from max(50, 5 log intervals)
    before the onset to the first peak. An applied inf update makes every later loss NaN,
    so the step was skipped: what an fp16 loss scaler does on an overflow (HF Trainer,
    Lightning and Megatron log that step's grad norm as inf/nan)."""
    first_peak = min((s for s, _ in inc.peaks), default=inc.peak_step)
    st, v = g.window_steps(_overflow_from(inc, data), first_peak)
    loss = np.array([data.loss.at_or_before(int(s)) for s in st], dtype=float)
    return st[~np.isfinite(v) & np.isfinite(loss)]


def _bad_loss(v: np.ndarray, absurd: float | None) -> np.ndarray:
    """Losses no model state gives: NaN/Inf, or at the absurd level (_absurd_level)."""
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(v) | (v >= absurd if absurd else False)


def _bad_loss_steps(data: RunData, lo: float, hi: float, absurd: float | None) -> list[int]:
    """Logged steps in [lo, hi] whose loss is NaN/Inf or at the absurd level."""
    st, v = data.loss.window_steps(lo, hi)
    return [int(s) for s in st[_bad_loss(v, absurd)]]


def _overflow_from(inc: Incident, data: RunData) -> float:
    """First step an overflow still belongs to the incident: max(50, 5 log intervals) before
    its onset (the scaler fights for a while before the loss leaves its trend)."""
    return inc.onset_step - max(50.0, 5 * data.interval)


def _overflows(inc: Incident, hit: np.ndarray) -> dict[str, FeatureValue]:
    """overflows, overflow_lead (steps from the first overflow to the onset)."""
    if not len(hit):
        return {"overflows": 0.0}
    return {"overflows": float(len(hit)), "overflow_lead": float(inc.onset_step - hit[0])}


def _cascade_start(inc: Incident, data: RunData, hit: np.ndarray) -> int:
    """Where the gradient's drift is measured up to: the onset, or the first overflow of a
    cascade (two or more skipped steps or halvings) that began before it. The scaler's fight
    is part of the incident; a gradient that only grew with it did not drift before it (an
    fp16 cascade), one that grew before it did (a too-high LR's gradient overflowing)."""
    lo, kinds = _overflow_from(inc, data), ("scale_halving", "skipped", "overflow")
    steps = [*hit.tolist(), *(e.step for e in inc.events if e.kind in kinds and e.step >= lo)]
    if len(steps) < 2 or min(steps) >= inc.onset_step:
        return inc.onset_step
    return int(min(steps))


def _scaler(
    inc: Incident, data: RunData, cfg: DetectConfig, absurd: float | None
) -> dict[str, FeatureValue]:
    """The scaler's halvings and skips up to the step where the loss went non-finite for
    good (that step included): from there every step overflows and the scaler halves for
    each, a reaction to a loss already gone (a too-high LR's divergence to NaN in an fp16
    run), not a cascade that led to it. A burst of overflowing steps the loss comes back
    from is the cascade itself. A halving at a loss that is itself NaN/Inf or absurd (or at
    the next logged point) is that value's reaction too: an overflow cascade skips steps
    whose loss is finite, a corrupted forward pass (a hardware fault) hands the scaler a
    bad loss. So is a halving in a window whose NaN iterations the trainer counted
    (Megatron's `number of nan iterations`: steps whose loss was NaN/Inf, which it averages
    out of `lm loss` and, when every step was, prints no loss at all), and those NaN steps
    are no overflow's skips. NaN iterations count over the whole incident."""
    lo = inc.onset_step - max(cfg.event_gap_steps, 3 * data.interval)
    hi = inc.span_end
    tail = nonfinite_tail(data.loss, int(np.searchsorted(data.loss.steps, inc.onset_step)))
    cut = hi if tail is None else tail
    evs = [e for e in inc.events if lo <= e.step <= hi]
    nan_at = {e.step: e.value for e in evs if e.kind == "nan_iter"}
    bad = sorted({*_bad_loss_steps(data, lo, hi, absurd), *nan_at})
    reach = max(1.0, data.interval)
    kept = [
        e
        for e in evs
        if e.step <= cut
        and not (e.kind == "scale_halving" and any(b <= e.step <= b + reach for b in bad))
    ]
    skips = [e.value - nan_at.get(e.step, 0.0) if e.kind == "skipped" else e.value
             for e in kept if e.kind in ("skipped", "overflow")]  # fmt: skip
    out: dict[str, FeatureValue] = {
        "scale_halvings": float(sum(e.value for e in kept if e.kind == "scale_halving")),
        "skipped": float(sum(max(0.0, x) for x in skips)),
        "nan_iters": float(sum(e.value for e in evs if e.kind == "nan_iter")),
    }
    if data.has("loss_scale"):
        s = data.aux["loss_scale"].window(lo, min(hi, cut))
        s = s[np.isfinite(s) & (s > 0)]
        out["scale_drop"] = float(s.max() / s.min()) if len(s) else 1.0
    else:
        out["scale_halvings"] = out["scale_halvings"] or None
        out["scale_drop"] = None
    return out
