"""Runs x incidents and the cross-run recurrences of one store, read from what detect stored."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.detect.model import CAUSE_TITLES
from forensics.report.fmt import plural
from forensics.store import Store


@dataclass
class FleetIncident:
    incident_id: int
    peak_step: int
    peaks: list[int]
    type: str
    cause: str
    confidence: float
    recurrence_id: int | None = None  # the cross-run recurrence one of its peaks belongs to


@dataclass
class FleetRun:
    run_id: str
    last_step: int
    incidents: list[FleetIncident] = field(default_factory=list)


@dataclass
class FleetRecurrence:
    id: int
    step: int
    runs: list[tuple[str, int]]  # (run_id, peak step)
    covering: int
    shared_data_order: bool | None
    by_chance: float
    absent: list[str]
    # runs that spike there too but whose loss tracked a run of `runs` before the step
    # (run, peak step, the run it tracks): that run repeated, counted once
    repeats: list[tuple[str, int, str]] = field(default_factory=list)

    @property
    def span(self) -> str:
        """The steps its runs peak at ("946-947" when they straddle two), so the label a reader
        sees never names a step at which a listed run did not peak."""
        peaks = [p for _, p in self.runs] or [self.step]
        lo, hi = min(peaks), max(peaks)
        return f"step {lo}" if lo == hi else f"steps {lo}–{hi}"

    @property
    def verdict(self) -> str:
        """What the recurrence says about the data, in words."""
        n = len(self.runs)
        order = {True: "that share a data order per their configs",
                 False: "whose configs give different data orders",
                 None: "(data order not in the configs)"}[self.shared_data_order]  # fmt: skip
        text = f"{n} runs {order} spike at {self.span}"
        if self.by_chance < 0.05:
            text += f" (chance coincidence {self.by_chance:.1e}): the data at this step"
        else:
            text += f" (chance coincidence {self.by_chance:.2f}: weak evidence)"
        if self.repeats:
            n = len(self.repeats)
            text += (
                f"; {plural(n, 'more run')} {'spikes' if n == 1 else 'spike'} there with a loss "
                "that tracked one of these step for step before it (one state met the batch "
                "twice: counted once)"
            )
        if self.absent:
            verb = "does" if len(self.absent) == 1 else "do"
            text += f"; {plural(len(self.absent), 'run')} covering the step {verb} not spike there"
        return text


@dataclass
class Fleet:
    runs: list[FleetRun]
    recurrences: list[FleetRecurrence]
    figure: Path | None = None
    figure_png: Path | None = None
    notes: list[str] = field(default_factory=list)


def read(store: Store) -> Fleet:
    """The fleet as stored: every run, its incidents, and the recurrences table."""
    recs = _recurrences(store)
    member = {(r, s): rec.id for rec in recs for r, s in rec.runs}
    member |= {(r, s): rec.id for rec in recs for r, s, _ in rec.repeats}
    ends = dict(
        store.con.execute("SELECT run_id, max(step) FROM metrics GROUP BY run_id").fetchall()
    )
    rows = store.con.execute(
        "SELECT run_id, incident_id, peak_step, peaks, type, cause, confidence FROM incidents "
        "ORDER BY run_id, incident_id"
    ).fetchall()
    runs = {r: FleetRun(r, int(ends.get(r) or 0)) for r in store.run_names()}
    for run_id, iid, peak, peaks, kind, cause, conf in rows:
        steps = [int(p["step"]) for p in json.loads(peaks or "[]")] or [int(peak)]
        rid = next((member[(run_id, s)] for s in steps if (run_id, s) in member), None)
        runs[run_id].incidents.append(
            FleetIncident(int(iid), int(peak), steps, kind, cause, float(conf or 0), rid)
        )
    return Fleet(list(runs.values()), recs)


def _recurrences(store: Store) -> list[FleetRecurrence]:
    rows = store.con.execute(
        "SELECT recurrence_id, step, run_id, peak_step, n_covering, shared_data_order, "
        "by_chance, absent_runs, repeat_of FROM recurrences ORDER BY recurrence_id, run_id"
    ).fetchall()
    out: dict[int, FleetRecurrence] = {}
    for rid, step, run_id, peak, cover, shared, chance, absent, twin in rows:
        rec = out.setdefault(
            rid,
            FleetRecurrence(
                rid, int(step), [], int(cover or 0), shared, float(chance or 0), json.loads(absent)
            ),
        )
        if twin is None:
            rec.runs.append((run_id, int(peak)))
        else:
            rec.repeats.append((run_id, int(peak), twin))
    return list(out.values())


def compare(
    store: Store, out: Path | None = None, *, png: bool = True, rules_dirs: Any = ()
) -> Fleet:
    """Detect every run of the store (with cross-run evidence), then read the fleet back and,
    with `out`, draw the overlay of the runs around the most shared recurring step. Replay
    verdicts of incidents detected where they were are kept (replay/kept.py)."""
    from forensics.detect import detect
    from forensics.replay.kept import redetect

    _, note = redetect(store, lambda: detect(store, None, rules_dirs=rules_dirs))
    fleet = read(store)
    if note:
        fleet.notes.append(note)
    if out is not None and fleet.recurrences:
        from forensics.fleet.figure import write_overlay

        fleet.figure, fleet.figure_png, note = write_overlay(store, fleet.recurrences[0], out, png)
        if note:
            fleet.notes.append(note)
    return fleet


def cause_label(cause: str) -> str:
    return CAUSE_TITLES.get(cause, cause)
