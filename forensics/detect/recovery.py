"""Recovery advice, what an incident cost and how severe it was: decided once, here.

docs/definitions.md gives each definition in words; the report only renders the stored
columns (recovery_step, recovery, restart_checkpoint_step, steps_lost, tokens_lost,
gpu_hours_lost, cost_usd, severity).

Recovery step: for a recoverable (type 1) incident, the detector's end step (the first
step back within tolerance of the pre-spike trend, docs/detection.md); none otherwise.

Advice, in order:
1. the winning rule's action for the incident's cause (`recovery:` in the rule file);
2. with no rule (cause unknown): continue for a recoverable incident; lower_lr when it is
   lingering/divergent and recurs (other loss excursions within recurrence_steps);
   restart_from_checkpoint otherwise;
3. data_corruption that happened more than once in the run becomes data_swap;
4. a recoverable incident is never rolled back: it came back on its own, so a restart
   would throw good steps away. restart_from_checkpoint becomes continue; lower_lr,
   data_swap and skip_batch apply from now on, without a restart.

Restart checkpoint (only for a lingering or divergent incident): the latest ingested
checkpoint at least `gap` steps before the onset, gap = min(checkpoint_gap,
checkpoint_gap_fraction x run length); checkpoints with optimizer state are preferred.

Off-trend stretches (loss incidents): an incident merges echoes and recurrences into one
(the cause rules read them together), but between two of its peaks the loss may have come
back to its pre-spike trend. Each stretch runs from its first step off the trend (the onset;
for a later peak, the first of the points leading to it that stand the onset threshold above
the trend) to the first step back, by the type's own test (typing.back_step) searched before
the next peak; a stretch not back before the next peak goes on through it. The last stretch
ends at the recovery step (type 1) or stays open (types 2 and 3).

Steps lost: the steps spent off the pre-spike trend, the sum of the stretches (a single
stretch: recovery step - onset step); an open stretch runs to the last logged step. A
restart from a known checkpoint throws everything after it away: then last logged step -
restart checkpoint. The run's total (`run_cost`) is the union of its incidents' spans: a
spike inside a lingering incident's open stretch is one incident's loss, not two.
Tokens = steps x tokens per step; GPU-hours = steps x seconds per step x world_size / 3600;
$ = GPU-hours x --gpu-hour-cost.

Severity: critical (divergent, or NaN/Inf in the incident) > major (lingering, or steps
lost >= major_fraction of the run, or >= major_gpu_hours) > moderate (steps lost >=
moderate_steps or moderate_fraction of the run, or >= moderate_gpu_hours) > minor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from forensics.detect import recurrence
from forensics.detect.config import DetectConfig
from forensics.detect.data import RunData, number
from forensics.detect.model import Evidence, Incident
from forensics.detect.refine import onset_threshold
from forensics.detect.typing import DIVERGENT, LINGERING, RECOVERABLE, back_step

RESTARTS = ("restart_from_checkpoint", "lower_lr", "data_swap", "skip_batch")
SEVERITIES = ("minor", "moderate", "major", "critical")
NONFINITE_KINDS = ("nonfinite_loss", "nonfinite_grad")
DIP_SHARE = 0.15  # a batch this far below the trend (and 6 sigma): the data-corruption-dip rule


@dataclass(frozen=True)
class Checkpoint:
    step: int
    has_optimizer: bool | None
    path: str = ""


# How the writer of a run's metrics (`runs.format`, the reader that read them) skips batches
# on a resume. Megatron-DeepSpeed (and the Megatron-LM forks BLOOM and GLM-130B trained
# with) take `--skip-train-iteration-range FIRST-LAST`, today's Megatron-LM
# `--iterations-to-skip ITER ...`; the Hugging Face Trainer has no skip option, but replay
# can name the dataset rows its sampler put into those steps. Every other writer (nanoGPT,
# llm.c, Lightning, OLMo, fairseq...) gets the plain step range: no flag is claimed. (The
# `megatron` reader also reads NeMo and nanotron logs; the advice names each flag's
# framework, so it claims nothing for them.)
SKIP_MECHANISMS = {
    "megatron": "megatron", "megatron_golden": "megatron", "hf_trainer": "hf_trainer"
}  # fmt: skip


def skip_mechanism(fmt: str | None) -> str:
    """`megatron`, `hf_trainer` or `plain` (no known option) for a run's `runs.format`."""
    return SKIP_MECHANISMS.get(fmt or "", "plain")


def action_argument(raw: str | None) -> int | None:
    """The number in `skip_batch:3`, `skip_batch(3)`, `restart=1200`, if any."""
    if not raw:
        return None
    m = re.search(r"[:(=]\s*(\d+)", raw)
    return int(m.group(1)) if m else None


def skip_steps(recovery: str | None, onset: int, peak: int) -> tuple[int, int]:
    """The steps a skip_batch advice skips: the action's range (`skip_batch:145-208`: the
    detector's, a dip's corrupt batches included), else k = its number (`skip_batch:3`)
    from the onset, else onset to peak. Replay names the rows of these steps and the report
    renders them: one rule for both."""
    span = re.search(r"[:(=]\s*(\d+)\s*-\s*(\d+)", recovery or "")
    if span:
        return int(span.group(1)), int(span.group(2))
    k = action_argument(recovery) or (peak - onset + 1)
    return onset, onset + k - 1


def dip_span(inc: Incident, data: RunData) -> tuple[int, int] | None:
    """First step of the stretch just before the onset where the loss stood far below its
    trend (15% and 6 noise scales, as the data-corruption-dip rule asks): a degenerate
    shard's own batches, which a skip must take out; the spike after it is the damage they
    did: (first, last) step of it. None when the point before the onset is not that low."""
    st, v = data.loss.steps, data.loss.values
    i = int(np.searchsorted(st, inc.onset_step)) - 1
    last = int(st[i]) if i >= 0 else None
    bar = min(float(np.log1p(-DIP_SHARE)), -6 * inc.sigma)
    first = None
    while i >= 0:
        r = inc.trend.resid(float(st[i]), float(v[i]))
        if r is None or not np.isfinite(r) or r > bar:
            break
        first, i = int(st[i]), i - 1
    return None if first is None or last is None else (first, last)


def action(inc: Incident, same_cause_count: int) -> str:
    best = next(
        (f for f in inc.findings if f.triggered and f.cause == inc.cause and f.recovery), None
    )
    if inc.cause == "data_corruption" and same_cause_count > 1:
        chosen = "data_swap"
    elif best is not None and best.recovery:
        chosen = best.recovery
    elif inc.type == RECOVERABLE:
        return "continue"
    else:
        recurs = (inc.features.get("recurrence") or 0) > 0  # type: ignore[operator]
        return "lower_lr" if recurs else "restart_from_checkpoint"
    if inc.type == RECOVERABLE and chosen.startswith("restart"):
        return "continue"  # it came back on its own: a rollback throws good steps away
    return chosen


def restart_checkpoint(
    onset: int, checkpoints: list[Checkpoint], run_steps: int, cfg: DetectConfig
) -> tuple[Checkpoint | None, int]:
    gap = int(min(cfg.checkpoint_gap, max(1, cfg.checkpoint_gap_fraction * run_steps)))
    ok = [c for c in checkpoints if c.step <= onset - gap]
    with_opt = [c for c in ok if c.has_optimizer]
    pool = with_opt or ok
    return (max(pool, key=lambda c: c.step) if pool else None), gap


def advise(
    inc: Incident,
    data: RunData,
    checkpoints: list[Checkpoint],
    same_cause_count: int,
    cfg: DetectConfig,
    gpu_hour_cost: float | None = None,
    *,
    log_space: bool,
) -> None:
    """Fill inc.recovery, restart checkpoint and cost fields (and their evidence).
    `log_space`: whether the screen read the loss in log units (Screen.log_space)."""
    inc.recovery = action(inc, same_cause_count)
    dip = dip_span(inc, data) if inc.recovery == "skip_batch" and inc.trend.log else None
    if dip is not None:
        inc.recovery = f"skip_batch:{dip[0]}-{inc.peak_step}"
        inc.evidence.append(
            Evidence(
                "dip",
                f"{dip[0]}-{dip[1]}",
                "the loss stood 15% and 6 noise scales or more below its trend before the onset: "
                "those batches are skipped too",
            )
        )
    inc.recovery_step = inc.end_step if inc.type == RECOVERABLE else None
    inc.off_trend = off_trend(inc, data, cfg, log_space)
    if inc.origin == "loss":
        inc.evidence.append(
            Evidence(
                "trend_slope",
                round(inc.trend.slope, 6),
                "exponent of the pre-spike power-law trend: trend(s) = pre_trend x "
                "((s + 1) / (onset + 1)) ^ slope",
            )
        )
    if len(inc.off_trend) > 1:
        inc.evidence.append(
            Evidence("off_trend", _stretches_text(inc.off_trend), "[first step off, first back)")
        )
    if inc.type != RECOVERABLE and inc.recovery in RESTARTS:
        run_steps = max(1, data.last_step - data.first_step)
        ck, gap = restart_checkpoint(inc.onset_step, checkpoints, run_steps, cfg)
        if ck is not None:
            inc.restart_checkpoint_step = ck.step
            note = f"latest checkpoint >= {gap} steps before the onset"
            if not ck.has_optimizer:
                note += "; it has no optimizer state (Adam moments restart from zero)"
            inc.evidence.append(Evidence("restart_checkpoint", ck.step, note))
        else:
            inc.evidence.append(
                Evidence(
                    "restart_checkpoint",
                    None,
                    f"no ingested checkpoint >= {gap} steps before the onset",
                )
            )
    _cost(inc, data, gpu_hour_cost)
    inc.severity = severity(inc, max(1, data.last_step - data.first_step), cfg)


def step_seconds(data: RunData) -> float | None:
    """Seconds per optimizer step: iter_time_ms or iter_time_s, else wall-clock, else
    tokens / throughput."""
    for name, scale in (("iter_time_ms", 1000.0), ("iter_time_s", 1.0)):
        if data.has(name):
            v = data.aux[name].values
            v = v[np.isfinite(v) & (v > 0)]
            if len(v):
                return float(np.median(v)) / scale
    if data.wall is not None and len(data.wall) > 2:
        st, w = data.wall.steps, data.wall.values
        ok = np.isfinite(w)
        ds, dw = np.diff(st[ok]), np.diff(w[ok])
        good = (ds > 0) & (dw > 0)
        if good.any():
            return float(np.median(dw[good] / ds[good]))
    tps, tok = _tokens_per_s(data), tokens_per_step(data)
    return tok / tps if tps and tok else None


def _tokens_per_s(data: RunData) -> float | None:
    if not data.has("tokens_per_s"):
        return None
    v = data.aux["tokens_per_s"].values
    v = v[np.isfinite(v) & (v > 0)]
    return float(np.median(v)) if len(v) else None


def tokens_per_step(data: RunData) -> float | None:
    """The config's tokens per step (or global batch x sequence length), else what the log's
    cumulative token counter (`consumed_tokens`: OLMo's `throughput/total_tokens`) gains per
    step: the median gain over consecutive logged points, so a resume's jump is not one."""
    tok = number(data.config.get("tokens_per_step")) or recurrence.tokens_per_step(data.config)
    if tok or not data.has("consumed_tokens"):
        return tok
    m = data.aux["consumed_tokens"]
    ok = np.isfinite(m.values)
    ds, dv = np.diff(m.steps[ok]), np.diff(m.values[ok])
    good = (ds > 0) & (dv > 0)
    return float(np.median(dv[good] / ds[good])) if good.any() else None


def _stretches_text(stretches: list[tuple[int, int | None]]) -> str:
    return ", ".join(f"{a}-{'end' if b is None else b}" for a, b in stretches)


def off_trend(
    inc: Incident, data: RunData, cfg: DetectConfig, log_space: bool
) -> list[tuple[int, int | None]]:
    """The incident's stretches off its pre-spike trend (module doc), in step order."""
    end = inc.recovery_step
    peaks = sorted({s for s, _ in inc.peaks if s >= inc.onset_step})
    if inc.origin != "loss" or len(peaks) < 2:
        return [(inc.onset_step, end)]
    out: list[tuple[int, int | None]] = []
    start = inc.onset_step
    for peak, nxt in zip(peaks, peaks[1:], strict=False):
        back = back_step(data.loss, inc.trend, inc.sigma, cfg, peak, nxt, log_space)
        if back is None:
            continue  # still off the trend when the next peak came: one stretch
        out.append((start, back))
        start = _rise_start(inc, data, cfg, nxt, back, log_space)
    out.append((start, end))
    return out


def _rise_start(
    inc: Incident, data: RunData, cfg: DetectConfig, peak: int, floor: int, log_space: bool
) -> int:
    """First of the points leading up to `peak` (after `floor`) that all stand the onset
    threshold above the trend (a non-finite loss counts as above)."""
    st, v = data.loss.window_steps(floor + 1, peak)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.log(v) if log_space else v
    above = ~np.isfinite(x) | (x - inc.trend.at(st) >= onset_threshold(inc.sigma, cfg))
    start = peak
    for s, up in zip(st[::-1], above[::-1], strict=True):
        if not up:
            break
        start = int(s)
    return start


def lost_spans(inc: Incident, last_step: int) -> list[tuple[int, int]]:
    """The [first, end) step ranges an incident's steps lost counts (module doc): its
    stretches off the trend, or everything after a restart checkpoint. The run's total is
    their union (`run_cost`), so a spike inside a lingering incident is not counted twice."""
    if (
        inc.recovery_step is None
        and inc.restart_checkpoint_step is not None
        and inc.recovery in RESTARTS
    ):
        spans = [(inc.restart_checkpoint_step, last_step)]
    else:
        stretches = inc.off_trend or [(inc.onset_step, inc.recovery_step)]
        spans = [(a, last_step if b is None else b) for a, b in stretches]
    return [(a, b) for a, b in spans if b > a]


def steps_lost(inc: Incident, last_step: int) -> int:
    """See the module doc: the steps off the trend, or everything after a restart checkpoint."""
    return sum(b - a for a, b in lost_spans(inc, last_step))


@dataclass(frozen=True)
class RunCost:
    """The run's compute lost to its incidents, each step counted once (`run_cost` table).

    `overlap_steps`: how many of the incidents' own steps lost fall inside another
    incident's (their sum minus the union), shown so the two totals can be reconciled."""

    incidents: int
    steps_lost: int
    overlap_steps: int
    tokens_lost: float | None
    gpu_hours_lost: float | None
    cost_usd: float | None


def run_cost(incidents: list[Incident], last_step: int, gpu_hour_cost: float | None) -> RunCost:
    """Union of the incidents' lost spans, priced with the run's per-step factors (every
    incident of a run carries the same ones, set by `_cost`)."""
    spans = sorted(s for inc in incidents for s in lost_spans(inc, last_step))
    union, reach = 0, None
    for a, b in spans:
        start = a if reach is None else max(a, reach)
        union += max(0, b - start)
        reach = b if reach is None else max(reach, b)
    own = sum(inc.steps_lost or 0 for inc in incidents)
    first = incidents[0] if incidents else None
    tok = first.tokens_per_step if first else None
    secs = first.seconds_per_step if first else None
    world = first.world_size if first else None
    tokens, gpu_h, usd = price(union, tok, secs, world, gpu_hour_cost)
    return RunCost(len(incidents), union, own - union, tokens, gpu_h, usd)


def price(
    steps: int, tok: float | None, secs: float | None, world: float | None, usd: float | None
) -> tuple[float | None, float | None, float | None]:
    """Tokens, GPU-hours and dollars of `steps` (module doc), each None when a factor is
    unknown: one formula for an incident and for the run's total."""
    tokens = steps * tok if tok else None
    gpu_h = steps * secs * world / 3600.0 if secs is not None and world else None
    return tokens, gpu_h, (gpu_h * usd if gpu_h is not None and usd is not None else None)


def _cost(inc: Incident, data: RunData, gpu_hour_cost: float | None) -> None:
    lost = inc.steps_lost = steps_lost(inc, data.last_step)
    secs = step_seconds(data)
    tok = tokens_per_step(data)
    if tok is None and secs is not None and _tokens_per_s(data):
        tok = secs * _tokens_per_s(data)  # type: ignore[operator]
    inc.seconds_per_step, inc.tokens_per_step = secs, tok
    world = inc.world_size = number(data.config.get("world_size"))
    inc.tokens_lost, inc.gpu_hours_lost, inc.cost_usd = price(lost, tok, secs, world, gpu_hour_cost)


def has_nonfinite(inc: Incident) -> bool:
    peak = inc.peak_value
    return (
        (peak is not None and not np.isfinite(peak))
        or any(e.kind in NONFINITE_KINDS for e in inc.events)
        or bool(inc.features.get("nonfinite_grad"))
    )


def severity(inc: Incident, run_steps: int, cfg: DetectConfig) -> str:
    """minor / moderate / major / critical from type, NaN/Inf and the cost (module doc)."""
    if inc.type == DIVERGENT or has_nonfinite(inc):
        return "critical"
    lost, gpu_h = inc.steps_lost or 0, inc.gpu_hours_lost or 0.0
    if inc.type == LINGERING or lost >= cfg.major_fraction * run_steps:
        return "major"
    if gpu_h >= cfg.major_gpu_hours:
        return "major"
    if lost >= min(cfg.moderate_steps, cfg.moderate_fraction * run_steps) or (
        gpu_h >= cfg.moderate_gpu_hours
    ):
        return "moderate"
    return "moderate" if notable(inc, cfg) else "minor"


def notable(inc: Incident, cfg: DetectConfig) -> bool:
    """A spike that healed at once is still worth its own post-mortem when the loss at
    least doubled (Mixtral's x2.1 at step 4050, back in 20 steps) or when other runs of the
    store spiked at the same step (modded-nanogpt's 946/947: the data at that point): the
    engineer asks about those, whatever they cost."""
    rise, others = inc.features.get("rise"), inc.features.get("cross_runs")
    doubled = isinstance(rise, float) and rise >= cfg.moderate_rise
    return doubled or (isinstance(others, (int, float)) and others >= cfg.moderate_cross_runs)
