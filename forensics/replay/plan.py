"""Which steps a replay examines: the offending step, the control steps, the replay window.

The offending step is the first step of the incident where the spike is substantially there
(half the peak excess, or a non-finite loss / grad norm): detection's onset can sit a step or
two early on the elevated stretch, and the batch to blame is the one where the loss jumps.

Everything "normal" is taken from *typical* steps: those whose logged loss lies within
TYPICAL_Z robust standard deviations of the median of the REF_WINDOW logged losses before the
onset. An anomaly can start before detection's onset (a run of degenerate batches makes the
loss dip before it spikes), and those steps must neither set the pre-spike trend nor serve as
controls. Controls are nearby typical steps outside every incident, examined on the same model
state as the offending batch, so a batch is only ever compared with its healthy neighbours.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from forensics.nonfinite import spell
from forensics.replay.context import Checkpoint, Incident, RunData
from forensics.replay.result import ReplayResult

REF_WINDOW = 100  # logged steps before the onset that define what a typical loss is
TYPICAL_Z = 5.0  # ... within this many robust standard deviations of their median
PRE_WINDOW = 30  # typical steps before the onset that define the pre-spike noise
LEVEL_POINTS = 10  # ... and the last of them that define its level
N_CONTROLS = 6  # control batches per incident
GAP = 2  # typical steps tolerated inside an atypical stretch
BIG = 1e9  # stands for an infinite excess (NaN/Inf loss) in comparisons


@dataclass
class Plan:
    incident: Incident
    offending: int  # the step whose batch is examined (state = after step offending - 1)
    trend: float  # pre-spike loss level (logged, typical steps)
    noise: float  # robust std of the logged loss's batch-to-batch changes before the onset
    controls: list[int]  # healthy steps whose batches are the controls
    atypical_before: list[int]  # the atypical steps just before the onset (may be the cause)
    start: int  # counterfactual replays start from the state after this step (k/4 before)
    end: int  # last step replayed (>= start + k; up to the peak, window_end)
    k: int
    note: str | None = None  # what was replayed instead of the incident's start (runner)


@dataclass
class Band:
    """What a typical logged loss is before the incident."""

    median: float
    sigma: float

    def typical(self, loss: float | None) -> bool:
        if loss is None or not math.isfinite(loss):
            return False
        return not math.isfinite(self.median) or abs(loss - self.median) <= TYPICAL_Z * self.sigma


def make_plan(data: RunData, inc: Incident, k: int) -> Plan:
    band = reference_band(data, inc.onset)
    trend, noise = pre_trend(data, inc, band)
    offending = inc.step if inc.step is not None else offending_step(data, inc, trend)
    first = min(inc.onset, offending)
    start = max(0, first - 1 - k // 4)
    end = max(start + k, offending, window_end(start, inc.peak, k))
    before = atypical_run(data, inc, band)
    controls = control_steps(data, inc, band, before[0] if before else inc.onset)
    return Plan(inc, offending, trend, noise, controls, before, start, end, k)


def reachable(data: RunData, plan: Plan, restorable: Callable[[Plan], bool]) -> Plan:
    """`plan`, or, when no checkpoint replay can restore precedes its offending step, the
    plan of the incident's first later off-trend stretch that one precedes. An incident can
    begin before the run's first checkpoint (a start-up blow-up at a too-high LR, which the
    warm-up's climb or its echoes later join: one instability) and still have most of it
    where the state exists; replaying that part tests the same cause, where the first
    stretch could only have its batch read. A step forced with --step is replayed as asked.
    `restorable`: whether the replay path (bundled model, the run's own Trainer) has a
    checkpoint for a plan."""
    inc = plan.incident
    if inc.step is not None or restorable(plan):
        return plan
    for onset, peak in inc.later:
        alt = make_plan(data, replace(inc, onset=onset, peak=peak, later=[]), plan.k)
        if restorable(alt):
            alt.note = (
                f"replayed the incident's stretch from step {onset}: no checkpoint replay "
                f"can restore precedes its first peak, step {plan.offending}"
            )
            return alt
    return plan


def noted(results: list[ReplayResult], plan: Plan) -> list[ReplayResult]:
    """Every probe's detail says when the replay examined a later stretch (reachable)."""
    if plan.note:
        for r in results:
            r.detail = f"{r.detail} ({plan.note})"
    return results


def window_end(start: int, peak: int, k: int) -> int:
    """The window reaches the incident's peak, at most 4k steps from its start: a counterfactual
    must show whether the fix prevents the worst of the incident, and a climb (a too-high LR
    in warm-up) peaks tens of steps after its onset, past a k-step window that measured only
    its first part (the simulator's 300-step runs: up to ~60 steps). The bound is a cost
    bound: a slow divergence's replay (three re-runs of the window) stays within 4k steps,
    and --k widens it."""
    return min(peak, start + 4 * k)


def restore_before(plan: Plan) -> int:
    """Replay restores the latest checkpoint strictly before this step: one saved at or before
    the window start. The loss logged at step t is the loss of the model that update t - 1
    made, so a spike at the onset can be the work of the updates just before it (a too-high
    LR kicking the model on an ordinary batch); a checkpoint between the window start and the
    onset would cut those updates out of the replay and of every counterfactual, leaving them
    to compare only models that are already off (and every batch looking hard on them)."""
    return plan.start + 1


def prefer_lead(ckpts: list[Checkpoint], before: int) -> Checkpoint:
    """The latest of `ckpts` (non-empty, in step order) saved before step `before`
    (restore_before), else the latest of them: the rule for the checkpoints a run's own
    trainer restores (Hugging Face, nanoGPT); the reference model's is runner.restore_checkpoint."""
    lead = [c for c in ckpts if c.step < before]
    return (lead or ckpts)[-1]


def reference_band(data: RunData, before: int) -> Band:
    """Median and robust std (1.4826 MAD) of the last REF_WINDOW finite logged losses."""
    steps = [s for s in data.steps_logged("loss") if s < before][-REF_WINDOW:]
    vals = np.array([data.value("loss", s) for s in steps], dtype=np.float64)
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return Band(math.nan, math.nan)
    med = float(np.median(vals))
    return Band(med, max(float(1.4826 * np.median(np.abs(vals - med))), 1e-12))


def pre_trend(data: RunData, inc: Incident, band: Band) -> tuple[float, float]:
    """Pre-spike loss level and the loss's batch-to-batch noise, from the typical logged losses
    before the onset (not detection's pre_value: an incident found from events or the grad
    norm has the pre value of that metric). Level: the median of the last LEVEL_POINTS. Noise:
    robust std (1.4826 MAD) of the step-to-step differences / sqrt(2), which a slow downward
    trend (early training) does not inflate."""
    before = [s for s in data.steps_logged("loss") if s < inc.onset]
    typical = [s for s in before if band.typical(data.value("loss", s))][-PRE_WINDOW:]
    vals = np.array([data.value("loss", s) for s in typical], dtype=np.float64)
    if vals.size == 0:
        return math.nan, 0.0
    level = float(np.median(vals[-LEVEL_POINTS:]))
    if vals.size < 3:
        return level, 0.0
    d = np.diff(vals)
    return level, float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))


def excess(loss: float | None, trend: float) -> float:
    """Loss above the trend; a NaN/Inf loss counts as BIG (an unbounded spike)."""
    if loss is None:
        return 0.0
    if not math.isfinite(loss):
        return BIG
    return loss - trend


def fmt_excess(x: float) -> str:
    """An excess for a detail sentence: BIG reads as what it stands for."""
    return "non-finite" if x >= BIG else fmt_num(x)


def fmt_steps(steps: list[int]) -> str:
    """ "1200-1219" for a contiguous run of steps, else the list ("" for none)."""
    if not steps:
        return ""
    if steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}-{steps[-1]}" if len(steps) > 1 else str(steps[0])
    return ", ".join(map(str, steps))


def fmt_num(x: float, digits: int = 4) -> str:
    """A number for a detail sentence, with NaN and Inf spelt as the report spells them."""
    return f"{x:.{digits}g}" if math.isfinite(x) else spell(x)


def offending_step(data: RunData, inc: Incident, trend: float) -> int:
    """First step in [onset, peak] with a non-finite loss/grad norm or half the peak excess."""
    steps = [s for s in range(inc.onset, inc.peak + 1) if data.value("loss", s) is not None]
    if not steps:
        return inc.onset
    for s in steps:
        if not all(math.isfinite(v) for v in _nonnull(data, s)):
            return s
    ex = [excess(data.value("loss", s), trend) for s in steps]
    top = max(ex)
    bar = 0.5 * top if top > 0 else top  # no excess at all: the highest step
    return next(s for s, e in zip(steps, ex, strict=True) if e >= bar)


def _nonnull(data: RunData, step: int) -> list[float]:
    vals = [data.value("loss", step), data.value("grad_norm", step)]
    return [v for v in vals if v is not None]


def control_steps(
    data: RunData, inc: Incident, band: Band, first: int, n: int = N_CONTROLS
) -> list[int]:
    """Up to n typical manifest steps, nearest first: before `first` (the onset, or the start
    of an atypical stretch before it), then after the incident; never in an incident."""
    spans = [(i.onset - 2, max(i.peak, i.end or i.peak) + 5) for i in data.incidents]
    spans.append((first - 2, max(inc.peak, inc.end or inc.peak) + 5))

    def healthy(s: int) -> bool:
        if s not in data.records or any(a <= s <= b for a, b in spans):
            return False
        finite = all(math.isfinite(v) for v in _nonnull(data, s))
        return finite and band.typical(data.value("loss", s))

    before = [s for s in sorted(data.records, reverse=True) if s < inc.onset and healthy(s)]
    after = [s for s in sorted(data.records) if s > inc.onset and healthy(s)]
    return sorted((before[: 2 * n : 2] + after[: 2 * n : 2])[:n])


def atypical_run(data: RunData, inc: Incident, band: Band, limit: int = 64) -> list[int]:
    """The atypical steps right before the onset (an anomaly that began before the detected
    onset, e.g. a dip on degenerate batches), walking back over gaps of at most GAP typical
    steps (a bad batch can have a typical-looking loss by chance), at most `limit` steps."""
    out: list[int] = []
    step, gap = inc.onset - 1, 0
    while step >= inc.onset - limit and data.value("loss", step) is not None and gap <= GAP:
        if band.typical(data.value("loss", step)):
            gap += 1
        else:
            out.append(step)
            gap = 0
        step -= 1
    return list(range(min(out), inc.onset)) if out else []
