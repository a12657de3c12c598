"""The rows a report is written from, read from the store into plain dataclasses.

JSON columns are decoded here once, so templates and figures see Python lists and dicts.
Ordering is fixed (by id, step, rule, probe) so that the same database always gives the
same Markdown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from forensics.canon import natural_key
from forensics.nonfinite import from_json
from forensics.store import conflicts
from forensics.store.db import Store
from forensics.store.schema import INCIDENT_COLUMNS_V3


def _json(text: Any, default: Any) -> Any:
    if text is None:
        return default
    if not isinstance(text, str):
        return text
    try:
        return from_json(json.loads(text))
    except ValueError:
        return default


def _evidence(text: Any) -> list[dict[str, Any]]:
    """`evidence` JSON: a list of {key, value, note}; a bare dict is accepted as key: value."""
    raw = _json(text, [])
    if isinstance(raw, dict):
        return [{"key": k, "value": v, "note": ""} for k, v in raw.items()]
    items = [e for e in raw if isinstance(e, dict)]
    return [
        {"key": e.get("key", ""), "value": e.get("value"), "note": e.get("note") or ""}
        for e in items
    ]


@dataclass
class Finding:
    rule_id: str
    cause: str
    triggered: bool
    confidence: float | None
    recovery: str | None
    evidence: list[dict[str, Any]]
    replay: str | None


@dataclass
class Replay:
    probe: str
    hypothesis: str
    verdict: str
    numbers: dict[str, Any]
    detail: str
    device: str | None
    wall_s: float | None


@dataclass
class StoredHypothesis:
    """One `hypotheses` row: a cause as detect weighed it on the log (supported / against /
    not_evaluable), with `needs` = the evidence sources that would evaluate it."""

    rank: int
    cause: str
    status: str
    confidence: float | None
    rule_id: str | None
    reason: str
    needs: list[str]


@dataclass
class LogNext:
    """One `log_next` row: a metric whose absence kept causes apart."""

    rank: int
    metric: str
    separates: list[str]
    why: str


@dataclass
class Recurrence:
    """One `recurrences` group that this incident belongs to: the other runs of the store
    that spike at the same step, as detect stored them."""

    step: int
    peak_step: int  # this run's peak in the group
    others: list[tuple[str, int]]  # (run, its peak step)
    n_covering: int | None
    shared_data_order: bool | None
    by_chance: float | None
    absent_runs: list[str]
    # run -> the run whose loss it tracked before the step (this run too, when it does):
    # one state, counted once (detect/recurrence.tracks)
    tracking: dict[str, str] = field(default_factory=dict)
    n_runs: int = 0  # the runs counted: one per state (this run's among them)
    me: str = ""  # the run whose post-mortem this is

    @property
    def other_states(self) -> list[str]:
        """The other runs listed that are another state than this run's, one per state."""
        return [name for name in self.names if not self.note(self.me, name)]

    @property
    def counted_others(self) -> int:
        """Other states that spiked here: this run's own state counts once, repeat or not."""
        return max(0, self.n_runs - 1)

    @property
    def repeated(self) -> int:
        """Other runs listed that are a counted run's state again."""
        return max(0, len(self.others) - self.counted_others)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.others]

    def note(self, me: str, name: str) -> str:
        """Why another run of the group counts once with a run it tracked, in words."""
        twin = self.tracking.get(name)
        if twin == me:
            return "its loss tracked this run's before the step: one state, counted once"
        if twin:
            return f"its loss tracked `{twin}`'s before the step: counted once"
        if self.tracking.get(me) == name:
            return "this run's loss tracked it before the step: one state, counted once"
        return ""


@dataclass
class Incident:
    """One `incidents` row plus its findings and replays."""

    incident_id: int
    metric: str
    onset_step: int
    peak_step: int
    end_step: int | None
    pre_value: float | None
    peak_value: float | None
    post_value: float | None
    grad_norm_peak: float | None
    type: str | None
    cause: str | None
    confidence: float | None
    recovery: str | None
    restart_checkpoint_step: int | None
    peaks: list[dict[str, Any]]
    evidence: list[dict[str, Any]]
    features: dict[str, Any]
    replay: str | None
    steps_lost: int | None
    tokens_lost: float | None
    gpu_hours_lost: float | None
    cost_usd: float | None
    # Columns added in issue 11 (None in databases detected by an older version).
    recovery_step: int | None = None
    severity: str | None = None
    lr_phase: str | None = None
    lr_at_onset: float | None = None
    lr_peak_step: int | None = None
    grad_norm_peak_step: int | None = None
    grad_norm_baseline: float | None = None
    seconds_per_step: float | None = None
    tokens_per_step: float | None = None
    world_size: float | None = None
    findings: list[Finding] = field(default_factory=list)
    replays: list[Replay] = field(default_factory=list)
    # Detect's weighed causes, what to log next and cross-run recurrences (issue 15).
    hypotheses: list[StoredHypothesis] = field(default_factory=list)
    log_next: list[LogNext] = field(default_factory=list)
    recurrences: list[Recurrence] = field(default_factory=list)
    # the run's metrics detect did not read (`unread_metrics`), by name
    unread: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def stretches(self) -> list[tuple[int, int | None]]:
        """The stored off-trend stretches (each peak's `from`/`back`, recovery.off_trend),
        in step order; empty for a database detected before they were stored."""
        out: list[tuple[int, int | None]] = []
        for p in self.peaks:
            if isinstance(p, dict) and p.get("from") is not None:
                pair = (int(p["from"]), None if p.get("back") is None else int(p["back"]))
                if pair not in out:
                    out.append(pair)
        return sorted(out)


@dataclass
class NearMiss:
    step: int
    metric: str
    value: float | None
    baseline: float | None
    ratio: float | None
    detail: str


def _rows(store: Store, sql: str, run_id: str) -> list[dict[str, Any]]:
    return store.query(sql, [run_id]).to_dicts()


def load_incidents(
    store: Store, run_id: str, unread: list[dict[str, Any]] | None = None
) -> list[Incident]:
    """Every incident of the run with its findings (strongest first) and replays; `unread`:
    the run's `unread_metrics` rows (load_unread), which every incident's page reads."""
    rows = _rows(store, "SELECT * FROM incidents WHERE run_id = ? ORDER BY incident_id", run_id)
    incidents = [_incident(r) for r in rows]
    by_id = {i.incident_id: i for i in incidents}
    for f in _rows(store, "SELECT * FROM findings WHERE run_id = ?", run_id):
        if f["incident_id"] in by_id:
            by_id[f["incident_id"]].findings.append(_finding(f))
    for r in _rows(store, "SELECT * FROM replays WHERE run_id = ?", run_id):
        if r["incident_id"] in by_id:
            by_id[r["incident_id"]].replays.append(_replay(r))
    _load_explained(store, run_id, by_id)
    by_metric = {u["metric"]: u for u in unread or []}
    for inc in incidents:
        inc.unread = by_metric
        inc.findings.sort(key=lambda f: (not f.triggered, -(f.confidence or 0.0), f.rule_id))
        inc.replays.sort(key=lambda r: (r.probe, r.hypothesis))
    return incidents


def has_table(store: Store, table: str) -> bool:
    """Databases detected before issue 10/15 lack the newer tables."""
    rows = store.con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table]
    ).fetchall()
    return bool(rows and rows[0][0])


def _load_explained(store: Store, run_id: str, by_id: dict[int, Incident]) -> None:
    """hypotheses, log_next and recurrences rows, attached to their incident."""
    if has_table(store, "hypotheses"):
        sql = "SELECT * FROM hypotheses WHERE run_id = ? ORDER BY incident_id, rank, cause"
        for h in _rows(store, sql, run_id):
            if h["incident_id"] in by_id:
                by_id[h["incident_id"]].hypotheses.append(_stored_hypothesis(h))
    if has_table(store, "log_next"):
        sql = "SELECT * FROM log_next WHERE run_id = ? ORDER BY incident_id, rank"
        for r in _rows(store, sql, run_id):
            if r.get("settled_by_replay"):
                continue  # replay told its causes apart (replay/verdicts.py)
            if r["incident_id"] in by_id:
                sep = _json(r["separates"], [])
                by_id[r["incident_id"]].log_next.append(
                    LogNext(int(r["rank"]), r["metric"], list(sep), r["why"] or "")
                )
    if has_table(store, "recurrences"):
        for inc in by_id.values():
            inc.recurrences = _recurrences(store, run_id, inc)


def _stored_hypothesis(h: dict[str, Any]) -> StoredHypothesis:
    needs = _json(h["needs"], [])
    return StoredHypothesis(
        rank=int(h["rank"]),
        cause=h["cause"],
        status=h["status"],
        confidence=h["confidence"],
        rule_id=h["rule_id"],
        reason=h["reason"] or "",
        needs=[str(n) for n in needs] if isinstance(needs, list) else [],
    )


def _recurrences(store: Store, run_id: str, inc: Incident) -> list[Recurrence]:
    """The recurrence groups holding one of this incident's peaks (or a peak between its
    onset and end): the stored rows, matched on this run's stored peak step."""
    peaks = {int(p["step"]) for p in inc.peaks if isinstance(p, dict) and "step" in p}
    peaks.add(inc.peak_step)
    last = inc.end_step if inc.end_step is not None else inc.peak_step
    mine = store.con.execute(
        "SELECT recurrence_id, step, peak_step FROM recurrences WHERE run_id = ? "
        "ORDER BY recurrence_id",
        [run_id],
    ).fetchall()
    out = []
    for rid, step, peak in mine:
        if peak not in peaks and not inc.onset_step <= peak <= last:
            continue
        rows = store.query(
            "SELECT * FROM recurrences WHERE recurrence_id = ? ORDER BY run_id", [rid]
        ).to_dicts()
        others = [(r["run_id"], int(r["peak_step"])) for r in rows if r["run_id"] != run_id]
        tracking = {r["run_id"]: r["repeat_of"] for r in rows if r.get("repeat_of")}
        first = rows[0]
        absent = _json(first["absent_runs"], [])
        out.append(
            Recurrence(
                step=int(step),
                peak_step=int(peak),
                others=others,
                n_covering=first["n_covering"],
                shared_data_order=first["shared_data_order"],
                by_chance=first["by_chance"],
                absent_runs=[str(a) for a in absent] if isinstance(absent, list) else [],
                tracking=tracking,
                n_runs=int(first["n_runs"]),
                me=run_id,
            )
        )
    return out


def load_unread(store: Store, run_id: str) -> list[dict[str, Any]]:
    """detect's `unread_metrics` rows: metrics logged but NaN/Inf where the loss is finite,
    which detection did not read (none for a database detected before they were stored)."""
    if not has_table(store, "unread_metrics"):
        return []
    return _rows(store, "SELECT * FROM unread_metrics WHERE run_id = ? ORDER BY metric", run_id)


def load_screen_coverage(store: Store, run_id: str) -> dict[str, Any] | None:
    """detect's `screen_coverage` row for the run (what the screen did not look at)."""
    if not has_table(store, "screen_coverage"):
        return None
    rows = _rows(store, "SELECT * FROM screen_coverage WHERE run_id = ?", run_id)
    return rows[0] if rows else None


def load_run_cost(store: Store, run_id: str) -> dict[str, Any] | None:
    """detect's `run_cost` row (the compute lost, each step counted once); None for a run
    detected before the table existed."""
    if not has_table(store, "run_cost"):
        return None
    rows = _rows(store, "SELECT * FROM run_cost WHERE run_id = ?", run_id)
    return rows[0] if rows else None


def load_rollbacks(store: Store, run_id: str) -> list[dict[str, Any]]:
    """detect's `rollbacks` rows (attempts the run went back from), in log order."""
    if not has_table(store, "rollbacks"):
        return []
    sql = "SELECT * FROM rollbacks WHERE run_id = ? ORDER BY resumed_step, source, attempt"
    return _rows(store, sql, run_id)


def load_abandoned(
    store: Store, run_id: str, metric: str, rollbacks: list[dict[str, Any]]
) -> list[tuple[str, pl.DataFrame]]:
    """Each rollback's abandoned `metric` values (`conflicts`), labelled for the overview."""
    out = []
    for r in rollbacks:
        frame = store.query(
            "SELECT step, value FROM conflicts WHERE run_id = ? AND source = ? AND metric = ? "
            f"AND coalesce(attempt, 0) = ? AND {conflicts.ATTEMPT_RULES} ORDER BY step",
            [run_id, r["source"], metric, r["attempt"]],
        )
        if frame.height:
            label = f"abandoned attempt (steps {r['resumed_step']}-{r['abandoned_step']})"
            out.append((label, frame))
    return out


NEW_COLUMNS = tuple(INCIDENT_COLUMNS_V3)  # detect columns added after the first schema


def _incident(r: dict[str, Any]) -> Incident:
    peaks = _json(r["peaks"], [])
    features = _json(r["features"], {})
    inc = Incident(
        incident_id=int(r["incident_id"]),
        metric=r["metric"] or "loss",
        onset_step=int(r["onset_step"]),
        peak_step=int(r["peak_step"] if r["peak_step"] is not None else r["onset_step"]),
        end_step=r["end_step"],
        pre_value=r["pre_value"],
        peak_value=r["peak_value"],
        post_value=r["post_value"],
        grad_norm_peak=r["grad_norm_peak"],
        type=None if r["type"] is None else str(r["type"]),
        cause=r["cause"],
        confidence=r["confidence"],
        recovery=r["recovery"],
        restart_checkpoint_step=r["restart_checkpoint_step"],
        peaks=peaks if isinstance(peaks, list) else [],
        evidence=_evidence(r["evidence"]),
        features=features if isinstance(features, dict) else {},
        replay=r["replay"],
        steps_lost=r["steps_lost"],
        tokens_lost=r["tokens_lost"],
        gpu_hours_lost=r["gpu_hours_lost"],
        cost_usd=r["cost_usd"],
    )
    for k in NEW_COLUMNS:  # absent in databases detected before these columns existed
        setattr(inc, k, r.get(k))
    return inc


def _finding(r: dict[str, Any]) -> Finding:
    return Finding(
        rule_id=r["rule_id"],
        cause=r["cause"],
        triggered=bool(r["triggered"]),
        confidence=r["confidence"],
        recovery=r["recovery"],
        evidence=_evidence(r["evidence"]),
        replay=r["replay"],
    )


def _replay(r: dict[str, Any]) -> Replay:
    numbers = _json(r["numbers"], {})
    return Replay(
        probe=r["probe"],
        hypothesis=r["hypothesis"],
        verdict=r["verdict"],
        numbers=numbers if isinstance(numbers, dict) else {},
        detail=r["detail"] or "",
        device=r["device"],
        wall_s=r["wall_s"],
    )


def load_near_misses(store: Store, run_id: str) -> list[NearMiss]:
    sql = "SELECT * FROM near_misses WHERE run_id = ? ORDER BY step, metric"
    return [
        NearMiss(r["step"], r["metric"], r["value"], r["baseline"], r["ratio"], r["detail"] or "")
        for r in _rows(store, sql, run_id)
    ]


def load_config(store: Store, run_id: str) -> dict[str, Any]:
    """The run's config. (Not `Store.run_config`: its `fetchone()` leaves a DuckDB 2.0 result
    open, and the next `Store.query` on the connection then fails.)"""
    rows = _rows(store, "SELECT config FROM runs WHERE run_id = ?", run_id)
    config = _json(rows[0]["config"], {}) if rows else {}
    return config if isinstance(config, dict) else {}


def load_format(store: Store, run_id: str) -> str | None:
    """The reader of the run's first metrics source (`runs.format`): who wrote the log."""
    rows = _rows(store, "SELECT format FROM runs WHERE run_id = ?", run_id)
    return rows[0]["format"] if rows else None


def clock_has_zone(store: Store, run_id: str) -> bool:
    """False when a metrics source of the run is a text log: its times are a printed clock
    without a time zone (`[2018-11-26 09:21:07,579 INFO]`), stored as if UTC."""
    from forensics.ingest.base import text_formats

    rows = _rows(store, "SELECT format FROM sources WHERE run_id = ? AND kind = 'metrics'", run_id)
    return not any(r["format"] in text_formats() for r in rows)


def load_sources(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's source files by kind, then path in natural order (checkpoint-50 before
    checkpoint-100, as a reader counts steps)."""
    sql = "SELECT path, kind, format, rows, warnings FROM sources WHERE run_id = ?"
    rows = _rows(store, sql, run_id)
    for r in rows:
        r["warnings"] = _json(r["warnings"], [])
    return sorted(rows, key=lambda r: (r["kind"], natural_key(r["path"])))


def load_checkpoint_steps(store: Store, run_id: str) -> list[int]:
    sql = "SELECT DISTINCT step FROM checkpoints WHERE run_id = ? AND step IS NOT NULL ORDER BY 1"
    return [int(r["step"]) for r in _rows(store, sql, run_id)]


def load_data_errors(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The log's reports of data the model cannot take (ingest's `data_error` events)."""
    sql = (
        "SELECT step, detail FROM events WHERE run_id = ? AND kind = 'data_error' "
        "ORDER BY step NULLS FIRST"
    )
    return _rows(store, sql, run_id)


def load_coverage(store: Store, run_id: str) -> list[dict[str, Any]]:
    """Per metric: how many steps, first and last step, median interval between logged steps,
    and how many of its values are NaN/Inf (from which step)."""
    sql = """SELECT metric, count(*) AS n, min(step) AS first, max(step) AS last,
                median(gap) AS interval,
                count(*) FILTER (WHERE NOT isfinite(value)) AS nonfinite,
                min(step) FILTER (WHERE NOT isfinite(value)) AS first_nonfinite FROM (
                SELECT metric, step, value,
                    step - lag(step) OVER (PARTITION BY metric ORDER BY step) AS gap
                FROM metrics WHERE run_id = ?)
             GROUP BY metric ORDER BY metric"""
    return _rows(store, sql, run_id)
