"""Attempts a run went back from: what made someone roll it back, and whether it came again.

A run resumed from a checkpoint appends to its log, so the steps after the checkpoint come
twice. Ingest keeps the later values as the run's trajectory and the earlier ones in
`conflicts` (rule REWOUND, with the file segment they were logged in). Those earlier values
are often the reason for the rollback: the spike, the divergence, the NaN that someone saw
in the night (tr8-104B rolled back to 6210 after the loss jumped to 11.4; GLM-130B
restarted from 40700 skipping 40701-40900). Keeping only the trajectory would erase the
incident that cost the most.

So each abandoned attempt is detected on its own trajectory: the run's values before the
first step it logged again, then the values it logged itself. The worst incident that
reaches past that step is the attempt's; the run's own trajectory at the same step says
what the rollback did:

- it spikes there again (an incident of the run holds the step): the same batch hit the
  restored model again (or whatever is deterministic at that step), so it is not a
  transient fault;
- it passes cleanly: the rollback got past it (a changed seed, data order or LR, a skipped
  range, or a transient fault that did not come back).

One `rollbacks` row per attempt (detect owns it; the report renders it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from forensics.detect.config import DetectConfig
from forensics.detect.data import Metric, RunData
from forensics.detect.model import Incident
from forensics.detect.recurrence import RunSpikes
from forensics.detect.rules import Rule
from forensics.detect.vocab import DIVERGENT, LINGERING
from forensics.store import Store
from forensics.store.conflicts import ATTEMPT_RULES

# Worst first: the incident that names an attempt.
_RANK = {DIVERGENT: 0, LINGERING: 1}


@dataclass(frozen=True)
class Attempt:
    """The values one file segment logged at steps a later segment logged again."""

    source: str
    attempt: int
    series: dict[str, Metric]  # canonical metric -> its abandoned values

    @property
    def first(self) -> int:
        """First step logged again: the run resumed from the step before it (or earlier)."""
        return min(int(m.steps[0]) for m in self.series.values())

    @property
    def last(self) -> int:
        return max(int(m.steps[-1]) for m in self.series.values())


@dataclass(frozen=True)
class Rollback:
    """One abandoned attempt, and what the run's trajectory did at its worst step."""

    run_id: str
    source: str
    attempt: int
    resumed_step: int  # first step logged again by the later segment
    abandoned_step: int  # last step the attempt logged that was logged again
    again_from_step: int  # first step trained twice: after the run's last point before it
    steps_again: int  # steps trained twice: again_from_step .. abandoned_step
    loss_points: int
    nonfinite_points: int
    first_nonfinite_step: int | None
    incident_type: str | None  # its worst incident's type (None: none found)
    onset_step: int | None
    peak_step: int | None
    peak_value: float | None
    trend_value: float | None  # the attempt's pre-spike trend at its onset
    run_value: float | None  # the run's own loss at the attempt's peak step (first logged)
    run_incident_id: int | None  # the run's incident holding that step: it came again


def load(store: Store, run_id: str, loss_name: str) -> list[Attempt]:
    """The run's abandoned attempts that logged its loss: the values a resume wrote over,
    in the same file (rule REWOUND, one attempt per file segment) or from a later file
    (rule RESUMED, one attempt per earlier file)."""
    rows = store.con.execute(
        "SELECT source, coalesce(attempt, 0), metric, step, value FROM conflicts "
        f"WHERE run_id = ? AND {ATTEMPT_RULES} ORDER BY source, 2, metric, step",
        [run_id],
    ).fetchall()
    grouped: dict[tuple[str, int], dict[str, dict[int, float]]] = {}
    for source, attempt, metric, step, value in rows:  # one value per step (one per rank)
        series = grouped.setdefault((source, int(attempt)), {})
        series.setdefault(metric, {})[int(step)] = np.nan if value is None else value
    out = []
    for (source, attempt), series in grouped.items():
        if loss_name not in series:
            continue  # an attempt with no loss has no trajectory to judge
        metrics = {
            m: Metric(np.array(list(v), np.int64), np.array(list(v.values()), float))
            for m, v in series.items()
        }
        out.append(Attempt(source, attempt, metrics))
    return out


def _spliced(before: Metric | None, after: Metric | None, cut: int) -> Metric | None:
    """The run's points before `cut`, then the attempt's own."""
    parts = []
    if before is not None:
        i = int(np.searchsorted(before.steps, cut))
        parts.append((before.steps[:i], before.values[:i]))
    if after is not None:
        parts.append((after.steps, after.values))
    if not parts:
        return None
    return Metric(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def attempt_data(data: RunData, a: Attempt) -> RunData:
    """The attempt's own trajectory: the run up to the first step it logged again, then its
    values (a metric it did not log again ends at that step)."""
    cut = a.first
    loss = _spliced(data.loss, a.series.get(data.loss_name), cut)
    assert loss is not None
    aux = {}
    for name in data.aux.keys() | (a.series.keys() - {data.loss_name}):
        m = _spliced(data.aux.get(name), a.series.get(name), cut)
        if m is not None and len(m):
            aux[name] = m
    events = [e for e in data.events if e[0] is None or e[0] < cut]
    return RunData(_label(data, a), data.loss_name, loss, aux, dict(data.config), None, events)


def _label(data: RunData, a: Attempt) -> str:
    return f"{data.run_id} (attempt to step {a.last})"


@dataclass(frozen=True)
class Detected:
    """An attempt and its own incidents (those reaching past its first step logged again)."""

    attempt: Attempt
    incidents: list[Incident]
    interval: float


def detect_attempts(
    data: RunData, attempts: list[Attempt], rules: list[Rule], cfg: DetectConfig | None = None
) -> list[Detected]:
    """Detect each attempt on its own trajectory; keep the incidents that are its own."""
    from forensics.detect.detector import detect_data  # the detector imports recurrence

    out = []
    for a in attempts:
        ad = attempt_data(data, a)
        det = detect_data(ad, rules, cfg)
        own = [i for i in det.incidents if i.peak_step >= a.first or i.end_step is None]
        out.append(Detected(a, own, ad.interval))
    return out


def spikes(data: RunData, found: list[Detected]) -> list[RunSpikes]:
    """Each attempt as the run's detection sees it (recurrence.in_attempts): the steps it
    logged again and its loss peaks there."""
    return [
        RunSpikes(
            _label(data, d.attempt),
            tuple(
                sorted(
                    s
                    for i in d.incidents
                    for s, v in i.peaks
                    if v is not None and np.isfinite(v) and s >= d.attempt.first
                )
            ),
            d.attempt.first,
            d.attempt.last,
            d.interval,
            None,
            None,
        )
        for d in found
    ]


def _worst(incidents: list[Incident]) -> Incident | None:
    """The attempt's worst incident: divergent before lingering before recoverable, then the
    largest rise."""
    if not incidents:
        return None
    return min(incidents, key=lambda i: (_RANK.get(i.type, 2), -_rise(i)))


def _rise(inc: Incident) -> float:
    rise = inc.features.get("rise")
    return float(rise) if isinstance(rise, int | float) else 0.0


def _again_from(data: RunData, a: Attempt) -> int:
    """The first step trained twice: the one after the run's last logged loss point before
    the first step logged again (a log every 10 steps that resumed from the checkpoint at
    1000 logs 1010 first; steps 1001-1009 were trained again too)."""
    i = int(np.searchsorted(data.loss.steps, a.first)) - 1
    return int(data.loss.steps[i]) + 1 if i >= 0 else a.first


def _run_value(data: RunData, step: int) -> float | None:
    """The run's own loss at `step`, or at the first point it logged after it."""
    st, v = data.loss.window_steps(step, step + max(1.0, data.interval))
    return float(v[0]) if len(v) else None


def _holding(incidents: list[Incident], step: int) -> int | None:
    """The run's incident whose span holds `step` (it spiked there too)."""
    for inc in incidents:
        if inc.onset_step <= step <= inc.span_end:
            return inc.id
    return None


def rows(data: RunData, found: list[Detected], run_incidents: list[Incident]) -> list[Rollback]:
    """One Rollback per attempt: its worst incident and what the run did at that step."""
    out = []
    for d in found:
        a, inc = d.attempt, _worst(d.incidents)
        loss = a.series[data.loss_name]
        bad = ~np.isfinite(loss.values)
        peak = None if inc is None else inc.peak_step
        again_from = _again_from(data, a)
        out.append(
            Rollback(
                data.run_id,
                a.source,
                a.attempt,
                a.first,
                a.last,
                again_from,
                a.last - again_from + 1,
                len(loss),
                int(bad.sum()),
                int(loss.steps[bad][0]) if bad.any() else None,
                None if inc is None else inc.type,
                None if inc is None else inc.onset_step,
                peak,
                None if inc is None else inc.peak_value,
                None if inc is None else inc.pre_value,
                None if peak is None else _run_value(data, peak),
                None if peak is None else _holding(run_incidents, peak),
            )
        )
    return out
