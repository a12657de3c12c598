"""Discrete events: non-finite values, loss-scale halvings, skipped / NaN iterations.

These are what a log says about numerics besides the loss curve. A cluster of them joins
the loss incident it overlaps, or forms an incident of its own when it is serious on its
own (a non-finite loss, a non-finite gradient that no loss scaler explains, an absurd
gradient, a collapse of the loss scale). The fp16 loss-scale search at start-up and the
scaler's routine single halving are normal and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from forensics.detect.config import DetectConfig
from forensics.detect.data import Metric, RunData
from forensics.detect.model import Evidence

STARTUP_KINDS = {"scale_halving", "skipped", "overflow", "nonfinite_grad", "nan_iter"}


@dataclass(frozen=True)
class Event:
    step: int
    kind: str  # nonfinite_loss | nonfinite_grad | absurd_grad | scale_halving | skipped | ...
    value: float


@dataclass
class Cluster:
    """Events close together in steps."""

    events: list[Event] = field(default_factory=list)

    @property
    def first(self) -> int:
        return self.events[0].step

    @property
    def last(self) -> int:
        return self.events[-1].step

    def total(self, kind: str) -> float:
        return float(sum(e.value for e in self.events if e.kind == kind))

    def count(self, kind: str) -> int:
        return sum(1 for e in self.events if e.kind == kind)

    def unexplained_nonfinite(self) -> bool:
        """A non-finite loss, or a non-finite gradient no loss-scale halving explains: never
        start-up noise, wherever it is."""
        return bool(
            self.count("nonfinite_loss")
            or (self.count("nonfinite_grad") and not self.count("scale_halving"))
        )

    def stands_alone(self, cfg: DetectConfig) -> bool:
        """Serious enough to be an incident without a loss spike."""
        unexplained_grad = self.count("nonfinite_grad") and not self.count("scale_halving")
        return bool(
            self.count("nonfinite_loss")
            or unexplained_grad
            or self.count("absurd_grad")
            or self.total("scale_halving") >= cfg.scale_halvings_min
        )

    def peak_step(self) -> int:
        """The worst moment: first non-finite loss, else absurd/non-finite gradient, else last."""
        for kind in ("nonfinite_loss", "absurd_grad", "nonfinite_grad", "scale_halving"):
            hits = [e.step for e in self.events if e.kind == kind]
            if hits:
                return hits[0]
        return self.last


# The longest run of skipped steps a healthy scaler makes: its start-up search halves from
# 2^16 towards 1 at most 16 times. A longer streak is a scale collapse (or a stalled run).
SKIP_STREAK_MAX = 16


def skipped_update(
    c: Cluster,
    loss: Metric,
    interval: float,
    cfg: DetectConfig,
    precision: str | None,
) -> bool:
    """A non-finite gradient norm the loss never felt, in a run that may use fp16: nothing
    else serious in the cluster, at most SKIP_STREAK_MAX such points, and the loss, during
    the cluster and on the next logged points, finite and at its level. An applied inf/NaN
    update makes the weights non-finite and every later loss NaN, so that loss means the
    update was skipped, by a loss scaler whose scale the log does not show (HF Trainer's
    fp16 overflow steps log `grad_norm: inf`): routine. In a run known to be bf16/fp32 no
    scaler overflows, and a skipped non-finite gradient is a fault a NaN guard caught (a
    flipped bit): that stays an incident."""
    if precision not in (None, "fp16"):
        return False
    serious = (
        c.count("nonfinite_loss")
        or c.count("absurd_grad")
        or c.total("scale_halving") >= cfg.scale_halvings_min
    )
    if serious or not 0 < c.count("nonfinite_grad") <= SKIP_STREAK_MAX:
        return False
    return _loss_on_level(
        loss, c, c.last + max(3.0, 2 * interval, 2 * local_interval(loss, c.last))
    )


def local_interval(m: Metric, step: int) -> float:
    """The log interval around `step`: the median spacing of the 10 logged points about it.
    A run's interval is one number, and a run that logs every 4 steps and later every step
    has 1: the next point after a skip at step 2004 is at 2008, not within 1 step."""
    i = int(np.searchsorted(m.steps, step))
    near = m.steps[max(0, i - 5) : i + 5]
    return float(np.median(np.diff(near))) if len(near) >= 2 else 0.0


def _loss_on_level(loss: Metric, c: Cluster, reach: float) -> bool:
    """The loss logged from the cluster's first step to the third point after it: there is
    a point after it by `reach`, and every one is finite and within 2x of the median of the
    five before (a loss logged as 0.0 beside a NaN gradient is a broken run, not a skip)."""
    a = int(np.searchsorted(loss.steps, c.first, side="left"))
    b = int(np.searchsorted(loss.steps, c.last, side="right"))
    if b >= len(loss.steps) or loss.steps[b] > reach:
        return False
    v = loss.values[a : b + 3]
    before = loss.values[max(0, a - 5) : a]
    before = before[np.isfinite(before)]
    level = float(np.median(before)) if len(before) else float(np.nanmedian(v))
    ok = np.isfinite(v) & (v > level / 2) & (v < level * 2)
    return bool(level > 0 and ok.all())


def _nonfinite(metric: Metric, kind: str) -> list[Event]:
    bad = ~np.isfinite(metric.values)
    return [Event(int(s), kind, 1.0) for s in metric.steps[bad]]


def _halvings(scale: Metric) -> list[Event]:
    """Each decrease of the loss scale, valued in halvings (65536 -> 4096 is 4)."""
    v = scale.values
    ok = np.isfinite(v) & (v > 0)
    st, v = scale.steps[ok], v[ok]
    if len(v) < 2:
        return []
    drop = np.log2(v[:-1] / v[1:])
    idx = np.flatnonzero(drop > 0.5)
    return [Event(int(st[i + 1]), "scale_halving", float(round(drop[i]))) for i in idx]


def _counters(metric: Metric, kind: str) -> list[Event]:
    v = np.nan_to_num(metric.values, nan=0.0)
    idx = np.flatnonzero(v > 0)
    return [Event(int(metric.steps[i]), kind, float(v[i])) for i in idx]


def _absurd_grads(grad: Metric, cfg: DetectConfig) -> list[Event]:
    v = grad.values
    ok = np.isfinite(v) & (v > 0)
    if ok.sum() < 10:
        return []
    med = float(np.median(v[ok]))
    idx = np.flatnonzero(ok & (v >= cfg.absurd_grad_ratio * med))
    return [Event(int(grad.steps[i]), "absurd_grad", float(v[i] / med)) for i in idx]


def collect(data: RunData, cfg: DetectConfig) -> list[Event]:
    """Every event of the run, sorted by step."""
    out = _nonfinite(data.loss, "nonfinite_loss")
    aux = data.aux
    if data.has("grad_norm"):
        out += _nonfinite(aux["grad_norm"], "nonfinite_grad") + _absurd_grads(aux["grad_norm"], cfg)
    if data.has("loss_scale"):
        out += _halvings(aux["loss_scale"])
    for name, kind in (("skipped_iters", "skipped"), ("nan_iters", "nan_iter")):
        if data.has(name):
            out += _counters(aux[name], kind)
    if data.has("overflow"):
        out += _counters(aux["overflow"], "overflow")
    out += [Event(int(s), "overflow", 1.0) for s, k, _ in data.events if k == "overflow" and s]
    # a log that reports a NaN loss without printing it at a step (TensorFlow's `Model
    # diverged with loss = NaN.`): the event stands at the last step printed before it
    out += [
        Event(int(s), "nonfinite_loss", 1.0)
        for s, k, _ in data.events
        if k == "nonfinite_loss" and s is not None
    ]
    return sorted(out, key=lambda e: (e.step, e.kind))


PROBE_KINDS = {"scale_halving", "skipped", "overflow", "nonfinite_grad"}


def _probe(events: list[Event]) -> bool:
    """The events of one step (and the next, where a logger prints the halved scale) are
    the scaler's routine probe: one halving, the step it skipped and its inf gradient."""
    return all(e.kind in PROBE_KINDS for e in events) and (
        sum(e.value for e in events if e.kind == "scale_halving") <= 1
    )


def cluster(events: list[Event], gap: float, probe_gap: float = 3.0) -> list[Cluster]:
    """Events within `gap` steps of each other form a cluster. A routine scaler probe more
    than `probe_gap` steps before the next event stays a cluster of its own: an overflow
    cascade halves on consecutive steps, and the probe a window earlier is not its onset."""
    clusters: list[Cluster] = []
    for e in events:
        if clusters and e.step - clusters[-1].last <= gap:
            clusters[-1].events.append(e)
        else:
            clusters.append(Cluster([e]))
    out: list[Cluster] = []
    for c in clusters:
        while True:
            # the skipped step and the halved scale a logger prints on the next step
            first = [e for e in c.events if e.step <= c.first + 1]
            rest = c.events[len(first) :]
            if not rest or not _probe(first) or rest[0].step - first[-1].step <= probe_gap:
                break
            out.append(Cluster(first))
            c = Cluster(rest)
        out.append(c)
    return out


def startup_end(clusters: list[Cluster], burn_in_step: int) -> int:
    """Last step of the start-up search: the clusters of scaler events that begin before the
    screen's burn-in step (the fp16 loss-scale search of the first iterations)."""
    end = burn_in_step
    for c in clusters:
        if c.first > end:
            break
        if all(e.kind in STARTUP_KINDS for e in c.events):
            end = max(end, c.last)
    return end


SHOWN_REPORTS = 3  # a log's own words quoted per incident at most (the rest are counted)


def report_evidence(data: RunData, lo: float, hi: float) -> list[Evidence]:
    """What the log itself said inside an incident's window, quoted: the lines ingest kept as
    events (`FloatingPointError: Loss became infinite or NaN at iteration=2137!`, a loss
    scaler's overflow reports). A reader trusts the page that quotes them; the report
    renders these rows and derives nothing from them."""
    inside = [(s, k, d) for s, k, d in data.events if s is not None and lo <= s <= hi]
    out = [
        Evidence("logged_report", int(s), d)
        for s, k, d in inside
        if k == "nonfinite_loss" and d and d.strip()
    ][:SHOWN_REPORTS]
    overflow = [(s, d) for s, k, d in inside if k == "overflow"]
    if overflow:
        a, b = overflow[0][0], overflow[-1][0]
        span = f"step {a}" if a == b else f"steps {a}-{b}"
        out.append(Evidence("logged_overflows", len(overflow), span))
        # the first with words to quote (rich wraps ColossalAI's `found inf` after `found`)
        said = next(((s, d) for s, d in overflow if d and d.strip()), None)
        if said is not None:
            out.append(Evidence("logged_overflow_first", int(said[0]), said[1]))
    return out
