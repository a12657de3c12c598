"""Everything the templates need, assembled from the store in one pass.

`build_report` does no file I/O and renders nothing, so tests can render the same
context with or without real figure files. Values stay raw (numbers, steps); the
templates format them with the filters in fmt.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
from forensics.report.throughput import throughput
from forensics.store.db import Store

EXCERPT_COLUMNS = ["grad_norm", "lr", "loss_scale"]
NEAR_MISS_ROWS = 20


@dataclass
class Options:
    """What the user can add on the command line; config values are used otherwise."""

    gpu_hour_cost: float | None = None
    world_size: int | None = None


@dataclass
class IncidentView:
    """One incident as its post-mortem template sees it (raw values; filters format them)."""

    n: int
    slug: str  # "spike-01": file stem of the post-mortem and prefix of its figures
    inc: Incident
    when: str  # the heading's date, or "step N" when the log has no wall-clock time
    type: Entry
    cause: Entry
    root: Finding | None
    others: list[classify.Hypothesis]
    facts: incident.Facts
    action: Action
    cost: cost.Cost
    excerpt_columns: list[str]
    excerpt: list[dict[str, Any]]
    rules: list[tuple[Finding, str]]  # every finding with the title of its cause
    probes: list[tuple[model.Replay, list[tuple[str, str]]]]
    replay_summary: str
    figure_names: dict[str, str] = field(default_factory=dict)

    @property
    def sym(self) -> incident.Symptoms:
        return self.facts.symptoms


@dataclass
class RunReport:
    """The whole run as the summary template sees it, plus the figures to write."""

    run: str
    metric: str
    config: dict[str, Any]
    incidents: list[IncidentView]
    near_misses: list[NearMiss]
    near_misses_more: int
    sources: list[dict[str, Any]]
    coverage: list[dict[str, Any]]
    missing: list[tuple[str, str]]
    span: dict[str, Any]
    totals: dict[str, Any]
    throughput: cost.Throughput
    figures: list[FigureSpec]
    types: dict[str, int]


def build_report(
    store: Store, run_id: str, kb: Knowledge, env: jinja2.Environment, opts: Options
) -> RunReport:
    """Read the run, its incidents and near-misses; compute facts; plan the figures."""
    frame = store.metrics_frame(run_id)
    config = model.load_config(store, run_id)
    incs = model.load_incidents(store, run_id)
    metric = incs[0].metric if incs else "loss"
    checkpoints = model.load_checkpoint_steps(store, run_id)
    facts = {i.incident_id: incident.compute(i, frame, checkpoints) for i in incs}
    covered = coverage(model.load_coverage(store, run_id))
    tp = throughput(frame, config, opts.gpu_hour_cost, opts.world_size)
    views = [_view(i, facts[i.incident_id], frame, kb, env, tp) for i in incs]
    near = model.load_near_misses(store, run_id)
    return RunReport(
        run=run_id,
        metric=metric,
        config=config,
        incidents=views,
        near_misses=near[:NEAR_MISS_ROWS],
        near_misses_more=max(0, len(near) - NEAR_MISS_ROWS),
        sources=model.load_sources(store, run_id),
        coverage=covered,
        missing=missing(covered, config, kb),
        span=span(frame, metric),
        totals=cost.totals([v.cost for v in views]),
        throughput=tp,
        figures=plan(frame, metric, views, run_id),
        types=_type_counts(views),
    )


def _view(
    inc: Incident,
    f: incident.Facts,
    frame: pl.DataFrame,
    kb: Knowledge,
    env: jinja2.Environment,
    tp: cost.Throughput,
) -> IncidentView:
    root = classify.root_finding(inc, kb)
    kind = kb.incident_type(inc.type)
    stored = {
        "tokens_lost": inc.tokens_lost,
        "gpu_hours_lost": inc.gpu_hours_lost,
        "cost_usd": inc.cost_usd,
    }
    wanted = [inc.metric] + [c for c in ["loss", *EXCERPT_COLUMNS] if c != inc.metric]
    cols = [c for c in wanted if c in frame.columns and c != "step"]
    return IncidentView(
        n=inc.incident_id,
        slug=f"spike-{inc.incident_id:02d}",
        inc=inc,
        when=_when(frame, inc.onset_step),
        type=kind,
        cause=kb.cause(inc.cause),
        root=root,
        others=classify.competitors(inc, kb, root),
        facts=f,
        action=recommend(inc, f, frame, kb, env, kind),
        cost=cost.incident_cost(f.steps_lost, f.steps_lost_how, tp, stored),
        excerpt_columns=cols,
        excerpt=_excerpt(frame, inc, f, cols),
        rules=[(x, kb.cause(x.cause).title) for x in inc.findings],
        probes=[(r, classify.scalar_numbers(r.numbers)) for r in inc.replays],
        replay_summary=_replay_summary(inc),
    )


def _when(frame: pl.DataFrame, step: int) -> str:
    at = series.last_before(frame, "wall_time", step + 1) if "wall_time" in frame.columns else None
    return utc(at.value) if at and series.is_finite(at.value) else f"step {step}"


def _excerpt(
    frame: pl.DataFrame, inc: Incident, f: incident.Facts, cols: list[str]
) -> list[dict[str, Any]]:
    """A dozen logged rows that tell the story: before, onset, climb, peak, after, recovery."""
    rows = frame.filter(pl.col(inc.metric).is_not_null()) if inc.metric in frame.columns else frame
    steps = rows["step"].to_list()
    if not steps:
        return []
    on = _index_at(steps, inc.onset_step)
    pk = max(on, _index_at(steps, inc.peak_step))
    climb = list(range(on, pk + 1))
    if len(climb) > 6:
        climb = [climb[round(j * (len(climb) - 1) / 5)] for j in range(6)]
    picked = set(range(max(0, on - 3), on)) | set(climb) | set(range(pk + 1, pk + 4))
    if f.symptoms.recovery is not None:
        picked.add(_index_at(steps, f.symptoms.recovery))
    marks = {inc.onset_step: "onset", inc.peak_step: "peak", f.symptoms.recovery: "recovered"}
    out = []
    for i in sorted(j for j in picked if j < len(steps)):
        row = rows.row(i, named=True)
        out.append(
            {
                "step": row["step"],
                "mark": marks.get(row["step"], ""),
                "values": [row[c] for c in cols],
            }
        )
    return out


def _index_at(steps: list[int], step: int) -> int:
    """Index of the first logged step >= `step` (the last one if none)."""
    for i, s in enumerate(steps):
        if s >= step:
            return i
    return len(steps) - 1


def _replay_summary(inc: Incident) -> str:
    """The verdict on the incident's own cause, then how many other hypotheses fell."""
    if not inc.replays:
        return (inc.replay or "not_run").replace("_", " ")
    own = "inconclusive" if inc.replay in (None, "not_run") else str(inc.replay)
    others = {r.hypothesis for r in inc.replays if r.verdict == "refuted"} - {inc.cause}
    return f"{own}; {len(others)} other cause{'s' if len(others) != 1 else ''} refuted"


def _type_counts(views: list[IncidentView]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in sorted(views, key=lambda v: v.type.key):
        counts[v.type.name] = counts.get(v.type.name, 0) + 1
    return counts
