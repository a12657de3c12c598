"""Everything the templates need, assembled from the store in one pass.

`build_report` does no file I/O and renders nothing, so tests can render the same
context with or without real figure files. Values stay raw (numbers, steps); the
templates format them with the filters in fmt.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

import jinja2
import polars as pl

from forensics.report import classify, cost, incident, model, series
from forensics.report.coverage import coverage, missing, span
from forensics.report.export import FigureSpec
from forensics.report.figure_plan import plan
from forensics.report.fmt import utc
from forensics.report.knowledge import Entry, Knowledge
from forensics.report.model import Finding, Incident, NearMiss
from forensics.report.recommend import Action, recommend
from forensics.store.db import Store

SEVERITIES = ("minor", "moderate", "major", "critical")  # detect/recovery.py decides them
DEFAULT_MIN_SEVERITY = "moderate"  # full post-mortems from this severity up

EXCERPT_COLUMNS = ["grad_norm", "lr", "loss_scale"]
NEAR_MISS_ROWS = 20


@dataclass
class Options:
    """What the user can add on the command line; config values are used otherwise."""

    gpu_hour_cost: float | None = None
    world_size: int | None = None
    min_severity: str = DEFAULT_MIN_SEVERITY  # below it: one line in the run summary

    def full(self, severity: str | None) -> bool:
        """Whether an incident of `severity` gets its own post-mortem."""
        rank = SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)
        return rank >= SEVERITIES.index(self.min_severity)


@dataclass
class IncidentView:
    """One incident as its post-mortem template sees it (raw values; filters format them)."""

    n: int
    slug: str  # "spike-01": file stem of the post-mortem and prefix of its figures
    inc: Incident
    when: str  # the heading's date, or "step N" when the log has no wall-clock time
    type: Entry
    cause: Entry
    root: model.StoredHypothesis | None  # detect's row for the stated cause
    others: list[classify.Hypothesis]
    severity: str
    full: bool  # has its own post-mortem (severity at or above the threshold)
    facts: incident.Facts
    action: Action
    cost: cost.Cost
    excerpt_columns: list[str]
    excerpt: list[dict[str, Any]]
    rules: list[tuple[Finding, str]]  # every finding with the title of its cause
    probes: list[tuple[model.Replay, list[tuple[str, str]]]]
    excerpts: dict[str, Any] | None  # decoded rows of the offending batch, as replay stored
    replay_summary: str
    refuted: list[str]  # titles of the causes replay refuted
    inconclusive: list[str]  # titles of the causes replay tested without a verdict
    unscreened: str | None  # screen_coverage note when the incident lies in or near it
    figure_names: dict[str, str] = field(default_factory=dict)
    near: list[NearMiss] = field(default_factory=list)  # detect's, of its metric, in its window

    @property
    def other_runs(self) -> list[str]:
        """The other runs of the store that spike with this incident (stored recurrences)."""
        return sorted({name for r in self.inc.recurrences for name in r.names})

    @property
    def other_states(self) -> list[str]:
        """Of other_runs, those another state than this run's and than each other's: a run
        whose loss tracked a listed one before the step is that run repeated."""
        return sorted({name for r in self.inc.recurrences for name in r.other_states})

    @property
    def root_status(self) -> str:
        """How detect weighed the stated cause on the log (replay may have decided it)."""
        return classify.STATUS.get(self.root.status, self.root.status) if self.root else ""

    @property
    def noise_tail(self) -> dict[str, Any] | None:
        """detect's finding on how routine this jump is for the run's own loss noise (a lone
        jump without a gradient norm at its step): the body states it beside the cause, so
        that the appendix never says what the page does not."""
        return next((e for e in self.inc.evidence if e.get("key") == "noise_tail"), None)

    @property
    def sym(self) -> incident.Symptoms:
        return self.facts.symptoms


@dataclass
class RunReport:
    """The whole run as the summary template sees it, plus the figures to write."""

    run: str
    metric: str
    config: dict[str, Any]
    incidents: list[IncidentView]  # every incident (the summary table)
    near_misses: list[NearMiss]
    near_misses_more: int
    sources: list[dict[str, Any]]
    coverage: list[dict[str, Any]]
    missing: list[tuple[str, str]]
    span: dict[str, Any]
    totals: dict[str, Any]
    figures: list[FigureSpec]
    types: dict[str, int]
    min_severity: str
    screen: dict[str, Any] | None = None  # detect's screen_coverage row
    source_names: list[dict[str, Any]] = field(default_factory=list)
    rollbacks: list[dict[str, Any]] = field(default_factory=list)  # detect's `rollbacks`
    data_errors: list[dict[str, Any]] = field(default_factory=list)  # ingest's `data_error` events
    unread: list[dict[str, Any]] = field(default_factory=list)  # detect's `unread_metrics`
    zoned: bool = True  # wall times carry a time zone (False: a text log's printed clock)

    @property
    def troubled_rollbacks(self) -> list[dict[str, Any]]:
        """The abandoned attempts in which detect found an incident."""
        return [r for r in self.rollbacks if r["incident_type"] is not None]

    @property
    def screen_note(self) -> str | None:
        """The coverage note when part of the log was not screened (else None)."""
        s = self.screen
        if not s or (s.get("screened_from_step") is not None and not s.get("unscreened_points")):
            return None
        return str(s.get("note") or "")

    @property
    def detailed(self) -> list[IncidentView]:
        """The incidents with a post-mortem of their own."""
        return [v for v in self.incidents if v.full]

    @property
    def minor(self) -> list[IncidentView]:
        return [v for v in self.incidents if not v.full]


# The metrics of detect's event incidents other than the loss (detector.event_incident): a
# loss-scale collapse, an absurd or non-finite gradient norm.
EVENT_METRICS = ("loss_scale", "grad_norm")


def _loss_metric(screen: dict[str, Any] | None, incs: list[Incident]) -> str:
    """The loss detection screened (its `screen_coverage` row), not the first incident's
    metric: a loss-scale collapse is an incident of `loss_scale`, but its type and recovery
    were judged on the loss."""
    if screen and screen.get("metric"):
        return str(screen["metric"])
    return next((i.metric for i in incs if i.metric not in EVENT_METRICS), "loss")


def build_report(
    store: Store, run_id: str, kb: Knowledge, env: jinja2.Environment, opts: Options
) -> RunReport:
    """Read the run, its incidents and near-misses; compute facts; plan the figures."""
    frame = store.metrics_frame(run_id)
    config = model.load_config(store, run_id)
    writer = model.load_format(store, run_id)
    unread = model.load_unread(store, run_id)
    incs = model.load_incidents(store, run_id, unread)
    screen = model.load_screen_coverage(store, run_id)
    metric = _loss_metric(screen, incs)
    facts = {i.incident_id: incident.compute(i, frame) for i in incs}
    covered = coverage(model.load_coverage(store, run_id))
    zoned = model.clock_has_zone(store, run_id)
    views = [
        _view(i, facts[i.incident_id], frame, kb, env, opts, screen, writer, config, zoned)
        for i in incs
    ]
    near = model.load_near_misses(store, run_id)
    for v in views:
        lo, hi = v.facts.window
        v.near = [m for m in near if m.metric == v.inc.metric and lo <= m.step <= hi]
    sources = [
        {**src, "path": display_path(src["path"]), "warnings": _local(src["warnings"])}
        for src in model.load_sources(store, run_id)
    ]
    rollbacks = model.load_rollbacks(store, run_id)
    abandoned = model.load_abandoned(store, run_id, metric, rollbacks)
    return RunReport(
        run=run_id,
        metric=metric,
        config=config,
        incidents=views,
        near_misses=near[:NEAR_MISS_ROWS],
        near_misses_more=max(0, len(near) - NEAR_MISS_ROWS),
        sources=sources,
        coverage=covered,
        missing=missing(covered, config, kb),
        span=span(frame, metric),
        totals=cost.totals(
            model.load_run_cost(store, run_id), incs, opts.world_size, opts.gpu_hour_cost
        ),
        figures=plan(frame, metric, views, run_id, abandoned),
        types=_type_counts(views),
        min_severity=opts.min_severity,
        screen=screen,
        rollbacks=rollbacks,
        data_errors=model.load_data_errors(store, run_id),
        unread=unread,
        zoned=zoned,
    )


def _view(
    inc: Incident,
    f: incident.Facts,
    frame: pl.DataFrame,
    kb: Knowledge,
    env: jinja2.Environment,
    opts: Options,
    screen: dict[str, Any] | None = None,
    writer: str | None = None,
    config: dict[str, Any] | None = None,
    zoned: bool = True,
) -> IncidentView:
    kind = kb.incident_type(inc.type)
    severity = inc.severity or "unrated"
    wanted = [inc.metric] + [c for c in ["loss", *EXCERPT_COLUMNS] if c != inc.metric]
    cols = [c for c in wanted if c in frame.columns and c != "step"]
    return IncidentView(
        n=inc.incident_id,
        slug=f"spike-{inc.incident_id:02d}",
        inc=inc,
        when=_when(frame, inc.onset_step, zoned),
        type=kind,
        cause=kb.cause(inc.cause),
        root=classify.stated(inc, kb),
        others=classify.competitors(inc, kb),
        severity=severity,
        full=opts.full(inc.severity),
        facts=f,
        action=recommend(inc, f, frame, kb, env, kind, writer),
        cost=cost.incident_cost(inc, opts.world_size, opts.gpu_hour_cost, config),
        excerpt_columns=cols,
        excerpt=_excerpt(frame, inc, f, cols),
        rules=[(x, kb.cause(x.cause).title) for x in inc.findings],
        probes=[(r, classify.scalar_numbers(r.numbers)) for r in inc.replays],
        excerpts=stored_excerpts(inc.replays),
        replay_summary=_replay_summary(inc),
        refuted=classify.causes_with_verdict(inc, kb, "refuted"),
        inconclusive=classify.causes_with_verdict(inc, kb, "inconclusive"),
        unscreened=unscreened_near(inc, screen),
    )


def stored_excerpts(replays: list[model.Replay]) -> dict[str, Any] | None:
    """The excerpts replay's data probe stored (decoded text, or raw ids when it found no
    tokenizer), picked out of its numbers for the Evidence block; nothing is recomputed."""
    for r in replays:
        n = r.numbers
        texts = n.get("excerpts")
        raw = texts is None
        if raw:
            texts = [" ".join(str(t) for t in ids) for ids in n.get("excerpt_ids") or []]
        if not texts:
            continue
        shown, of = n.get("excerpt_tokens") or [], n.get("row_tokens")
        rows = [
            {"row": row, "text": t, "tokens": shown[i] if i < len(shown) else None}
            for i, (row, t) in enumerate(zip(n.get("excerpt_rows") or [], texts, strict=False))
        ]
        how = (
            f"raw token ids, {str(n.get('excerpts_note') or 'no tokenizer').split(' (looked')[0]}"
            if raw
            else f"decoded with {display_path(n['tokenizer'])}"
            if n.get("tokenizer")
            else "decoded"
        )
        return {"step": n.get("step"), "order": n.get("excerpt_order"), "how": how,
                "row_tokens": of, "rows": rows}  # fmt: skip
    return None


def unscreened_near(inc: Incident, screen: dict[str, Any] | None) -> str | None:
    """detect's coverage note, when the incident lies in or near what was not screened: a
    log the screen did not judge, a short log, or an onset no later than the unscreened
    start-up's own length after its end (docs/reports.md)."""
    if not screen:
        return None
    note = str(screen.get("note") or "")
    if screen.get("screened_from_step") is None or screen.get("short_log"):
        return note
    end, first = screen.get("unscreened_to_step"), screen.get("first_step")
    if not screen.get("unscreened_points") or end is None or first is None:
        return None
    return note if inc.onset_step <= end + (end - first + 1) else None


_ABSOLUTE = re.compile(r"(?<![\w.])/[^\s,;:()'\"]+")


def _local(warnings: list[str]) -> list[str]:
    """What ingest said about a source (a 0.0 read as NaN, a resumed run, skipped lines),
    with every absolute path shown as display_path shows the source itself."""
    return [_ABSOLUTE.sub(lambda m: display_path(m.group(0)), str(w)) for w in warnings]


def display_path(path: str) -> str:
    """A source as the reader needs it: its folder and file name, never the analysing
    machine's absolute path (which means nothing to the team the report is sent to)."""
    p = PurePath(str(path))
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def _when(frame: pl.DataFrame, step: int, zoned: bool = True) -> str:
    at = series.last_before(frame, "wall_time", step + 1) if "wall_time" in frame.columns else None
    return utc(at.value, zoned) if at and series.is_finite(at.value) else f"step {step}"


def _excerpt(
    frame: pl.DataFrame, inc: Incident, f: incident.Facts, cols: list[str]
) -> list[dict[str, Any]]:
    """A dozen logged rows that tell the story: before, onset, climb, peak, after, recovery."""
    rows = frame.filter(pl.col(inc.metric).is_not_null()) if inc.metric in frame.columns else frame
    steps = rows["step"].to_list()
    if not steps:
        return []
    if f.symptoms.stretches:
        return _stretch_excerpt(rows, steps, inc, f, cols)
    on = _index_at(steps, inc.onset_step)
    pk = max(on, _index_at(steps, inc.peak_step))
    climb = list(range(on, pk + 1))
    if len(climb) > 6:
        climb = [climb[round(j * (len(climb) - 1) / 5)] for j in range(6)]
    picked = set(range(max(0, on - 3), on)) | set(climb) | set(range(pk + 1, pk + 4))
    if f.symptoms.recovery is not None:
        picked.add(_index_at(steps, f.symptoms.recovery))
    marks = {inc.onset_step: "onset", inc.peak_step: "peak", f.symptoms.recovery: "recovered"}
    if inc.onset_step == inc.peak_step:
        marks[inc.onset_step] = "onset, peak"
    return _excerpt_rows(rows, picked, marks, cols)


def _stretch_excerpt(
    rows: pl.DataFrame, steps: list[int], inc: Incident, f: incident.Facts, cols: list[str]
) -> list[dict[str, Any]]:
    """Several stretches off the trend: each one's first step, peaks and first step back,
    with three rows before the onset and after the last peak."""
    on = _index_at(steps, inc.onset_step)
    marks: dict[int, str] = {}
    for x in f.symptoms.stretches:
        marks[x.start] = "off trend"
        for p in x.peaks:
            marks[p.step] = "peak"
        if x.back is not None:
            marks[x.back] = "recovered" if x.back == f.symptoms.recovery else "back"
    peaks = {p.step for p in _peaks(f)}
    marks[inc.onset_step] = "onset, peak" if inc.onset_step in peaks else "onset"
    last = _index_at(steps, max(p.step for p in _peaks(f)))
    picked = {_index_at(steps, s) for s in marks} | set(range(max(0, on - 3), on))
    picked |= set(range(last + 1, last + 4))
    return _excerpt_rows(rows, picked, marks, cols)


def _excerpt_rows(
    rows: pl.DataFrame, picked: set[int], marks: dict[Any, str], cols: list[str]
) -> list[dict[str, Any]]:
    """The picked logged rows, with a row saying how many logged steps lie between two shown
    ones: without it, 12401 then 12403 reads as if 12402 was never logged."""
    out: list[dict[str, Any]] = []
    last = None
    for i in sorted(j for j in picked if j < rows.height):
        if last is not None and i > last + 1:
            out.append({"step": None, "mark": "", "gap": i - last - 1, "values": []})
        row = rows.row(i, named=True)
        out.append({"step": row["step"], "mark": marks.get(row["step"], ""), "gap": 0,
                    "values": [row[c] for c in cols]})  # fmt: skip
        last = i
    return out


def _peaks(f: incident.Facts) -> list[incident.Point]:
    return [p for x in f.symptoms.stretches for p in x.peaks]


def _index_at(steps: list[int], step: int) -> int:
    """Index of the first logged step >= `step` (the last one if none)."""
    for i, s in enumerate(steps):
        if s >= step:
            return i
    return len(steps) - 1


def _replay_summary(inc: Incident) -> str:
    """The stored verdict on the incident's cause (incidents.replay), then how many of the
    other causes replay refuted (findings.replay, as replay stored them)."""
    if not inc.replays:
        return (inc.replay or "not_run").replace("_", " ")
    own = str(inc.replay or "not_run").replace("_", " ")
    drifts = [r.numbers.get("drift_step") for r in inc.replays if r.hypothesis == inc.cause]
    step = next((d for d in drifts if d is not None), None)
    if own == "confirmed" and step is not None:
        own += f" statistically, the replay drifting off the log by rounding from step {step}"
    others = {f.cause for f in inc.findings if f.replay == "refuted"} - {inc.cause}
    return f"{own}; {len(others)} other cause{'s' if len(others) != 1 else ''} refuted"


def _type_counts(views: list[IncidentView]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in sorted(views, key=lambda v: v.type.key):
        counts[v.type.name] = counts.get(v.type.name, 0) + 1
    return counts
