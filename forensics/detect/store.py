"""Read a run for detection and write what detection found (incidents, findings, near-misses).

Writing is idempotent: the run's previous detect rows are deleted in the same transaction,
so re-running detect replaces them. incidents.json is rendered from the stored rows, so the
file and the database always agree.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from forensics.detect import unread
from forensics.detect.data import AUX_METRICS, LOSS_METRICS, RunData, run_data
from forensics.detect.model import Detection, Incident
from forensics.detect.recovery import Checkpoint
from forensics.errors import ForensicsError
from forensics.nonfinite import to_json
from forensics.store import Store


class NotDetectedError(ForensicsError):
    """`report` or `replay` on a run that `detect` never ran on."""


# Replays belong to the incidents they tested: a new detection replaces the incidents, so
# their replays go too (a verdict must never be shown beside an incident it did not test).
DETECT_TABLES = (
    "incidents", "findings", "near_misses", "run_cost", "rollbacks", "replays", "contributions",
    "unread_metrics",
)  # fmt: skip
DETECTED_KEY = "detected_at:"  # meta key per run: detection ran (even if it found nothing)


def _dumps(v: Any) -> str:
    return json.dumps(to_json(v))


def detect_frame(store: Store, run_id: str) -> pl.DataFrame:
    """The wide frame of the metrics detection reads (step, wall_time, one column each).

    Pivots only those metrics (constant names, no user text in the SQL): the store's
    all-metric `metrics_wide` view costs seconds on a million steps, this about one."""
    wanted = ", ".join(f"'{m}'" for m in (*LOSS_METRICS, *AUX_METRICS))
    present = store.con.execute(
        f"SELECT DISTINCT metric FROM metrics WHERE run_id = ? AND metric IN ({wanted})",
        [run_id],
    ).fetchall()
    names = [m for m in (*LOSS_METRICS, *AUX_METRICS) if (m,) in present]
    if not names:
        return pl.DataFrame(schema={"step": pl.Int64})
    cols = ", ".join(f"first(value) FILTER (WHERE metric = '{m}') AS \"{m}\"" for m in names)
    inside = ", ".join(f"'{m}'" for m in names)
    return store.query(
        f"SELECT step, min(wall_time) AS wall_time, {cols} FROM metrics "
        f"WHERE run_id = ? AND metric IN ({inside}) GROUP BY step ORDER BY step",
        [run_id],
    )


def load_run(store: Store, run_id: str) -> RunData:
    frame = detect_frame(store, run_id)
    events = store.con.execute(
        "SELECT step, kind, detail FROM events WHERE run_id = ? ORDER BY step", [run_id]
    ).fetchall()
    return run_data(frame, store.run_config(run_id), run_id, [tuple(e) for e in events])


def checkpoints(store: Store, run_id: str) -> list[Checkpoint]:
    rows = store.con.execute(
        "SELECT step, has_optimizer, path FROM checkpoints WHERE run_id = ? AND step IS NOT NULL",
        [run_id],
    ).fetchall()
    return [Checkpoint(int(s), h, p) for s, h, p in rows]


def has_batches(store: Store, run_id: str) -> bool:
    """Did the run ingest a batch manifest (replay can then tell the batch causes apart)?"""
    row = store.con.execute("SELECT count(*) FROM batches WHERE run_id = ?", [run_id]).fetchone()
    return bool(row and row[0])


def _incident_row(run_id: str, inc: Incident, now: datetime) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "incident_id": inc.id,
        "metric": inc.metric,
        "onset_step": inc.onset_step,
        "peak_step": inc.peak_step,
        "end_step": inc.end_step,
        "pre_value": inc.pre_value,
        "peak_value": inc.peak_value,
        "post_value": inc.post_value,
        "grad_norm_peak": inc.grad_norm_peak,
        "grad_norm_peak_step": inc.grad_norm_peak_step,
        "grad_norm_baseline": inc.grad_norm_baseline,
        "type": inc.type,
        "cause": inc.cause,
        "confidence": inc.confidence,
        "recovery": inc.recovery,
        "restart_checkpoint_step": inc.restart_checkpoint_step,
        "peaks": _dumps(_peaks(inc)),
        "evidence": _dumps([e.as_dict() for e in inc.evidence]),
        "features": _dumps(inc.features),
        "replay": "not_run",
        "steps_lost": inc.steps_lost,
        "tokens_lost": inc.tokens_lost,
        "gpu_hours_lost": inc.gpu_hours_lost,
        "cost_usd": inc.cost_usd,
        "detected_at": now,
        "recovery_step": inc.recovery_step,
        "severity": inc.severity,
        "lr_phase": inc.lr_phase,
        "lr_at_onset": inc.lr_at_onset,
        "lr_peak_step": inc.lr_peak_step,
        "seconds_per_step": inc.seconds_per_step,
        "tokens_per_step": inc.tokens_per_step,
        "world_size": inc.world_size,
    }


def _peaks(inc: Incident) -> list[dict[str, Any]]:
    """Each peak with the off-trend stretch that holds it: `from` its first step off the
    pre-spike trend, `back` its first step back (None: never back). recovery.off_trend."""
    out = []
    for step, value in inc.peaks:
        held = [(a, b) for a, b in inc.off_trend if a <= step]
        a, b = held[-1] if held else (inc.onset_step, inc.recovery_step)
        out.append({"step": step, "value": value, "from": a, "back": b})
    return out


def _finding_rows(run_id: str, inc: Incident) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run_id,
            "incident_id": inc.id,
            "rule_id": f.rule_id,
            "cause": f.cause,
            "triggered": f.triggered,
            "confidence": f.confidence,
            "recovery": f.recovery,
            "evidence": _dumps([e.as_dict() for e in f.evidence]),
            "replay": "not_run",
        }
        for f in inc.findings
    ]


# Every column typed: a run whose per-step factors are unknown stores NULLs, not a Null column.
_COST_SCHEMA = {
    "incidents": pl.Int32,
    "steps_lost": pl.Int64,
    "overlap_steps": pl.Int64,
    "tokens_lost": pl.Float64,
    "gpu_hours_lost": pl.Float64,
    "cost_usd": pl.Float64,
}

_INCIDENT_SCHEMA = {
    "incident_id": pl.Int32,
    "onset_step": pl.Int64,
    "peak_step": pl.Int64,
    "end_step": pl.Int64,
    "restart_checkpoint_step": pl.Int64,
    "steps_lost": pl.Int64,
    "recovery_step": pl.Int64,
    "lr_peak_step": pl.Int64,
    "grad_norm_peak_step": pl.Int64,
    **{
        k: pl.Float64
        for k in (
            "pre_value",
            "peak_value",
            "post_value",
            "grad_norm_peak",
            "confidence",
            "tokens_lost",
            "gpu_hours_lost",
            "cost_usd",
            "grad_norm_baseline",
            "lr_at_onset",
            "seconds_per_step",
            "tokens_per_step",
            "world_size",
        )
    },
}


def write(store: Store, det: Detection) -> None:
    """Replace the run's incidents, findings and near-misses with `det`, atomically."""
    now = datetime.now(UTC).replace(tzinfo=None)
    incidents = [_incident_row(det.run_id, i, now) for i in det.incidents]
    findings = [r for i in det.incidents for r in _finding_rows(det.run_id, i)]
    near = [
        {
            "run_id": det.run_id,
            "step": n.step,
            "metric": n.metric,
            "value": n.value,
            "baseline": n.baseline,
            "ratio": n.ratio,
            "detail": n.detail,
        }
        for n in det.near_misses
    ]
    with store.transaction():
        for table in DETECT_TABLES:
            store.con.execute(f"DELETE FROM {table} WHERE run_id = ?", [det.run_id])
        if incidents:
            store.insert_frame(
                "incidents", pl.DataFrame(incidents, schema_overrides=_INCIDENT_SCHEMA)
            )
        if findings:
            store.insert_frame("findings", pl.DataFrame(findings))
        if near:
            store.insert_frame("near_misses", pl.DataFrame(near))
        if det.rollbacks:
            rows = [dataclasses.asdict(r) for r in det.rollbacks]
            store.insert_frame("rollbacks", pl.DataFrame(rows, infer_schema_length=None))
        if det.unread:
            store.insert_frame(unread.TABLE, unread.rows(det.run_id, det.unread))
        if det.cost is not None:
            cost = {"run_id": det.run_id} | dataclasses.asdict(det.cost)
            store.insert_frame("run_cost", pl.DataFrame([cost], schema_overrides=_COST_SCHEMA))
        store.con.execute(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            [DETECTED_KEY + det.run_id, now.isoformat()],
        )


def was_detected(store: Store, run_id: str) -> bool:
    """True once `detect` has run on `run_id` (older databases: it stored incidents)."""
    marked = store.con.execute(
        "SELECT count(*) FROM meta WHERE key = ?", [DETECTED_KEY + run_id]
    ).fetchall()[0][0]
    if marked:
        return True
    rows = store.con.execute("SELECT count(*) FROM incidents WHERE run_id = ?", [run_id])
    return bool(rows.fetchall()[0][0])


def require_detected(store: Store, run_id: str, db: object = "DB") -> None:
    """Raise NotDetectedError, naming the command to run, if detect never ran on the run."""
    if not was_detected(store, run_id):
        raise NotDetectedError(
            f'run "{run_id}" was never detected: run `forensics detect --db {db} --run '
            f"{run_id}` (or `forensics analyze`) first"
        )


def as_stored(store: Store, det: Detection) -> tuple[Detection, dict[int, str]]:
    """`det` with each incident's cause, confidence, recovery and restart checkpoint as the
    store holds them now, and the replay verdict of each cause: replay may have changed them
    (apply_verdicts), and a table printed after it must say what README.md and
    incidents.json say, not detection's first guess."""
    rows = store.query(
        "SELECT incident_id, cause, confidence, recovery, restart_checkpoint_step, replay "
        "FROM incidents WHERE run_id = ?",
        [det.run_id],
    ).rows()
    stored = {r[0]: r[1:] for r in rows}
    incidents, verdicts = [], {}
    for inc in det.incidents:
        if inc.id not in stored:
            incidents.append(inc)
            continue
        cause, conf, recovery, restart, verdicts[inc.id] = stored[inc.id]
        incidents.append(dataclasses.replace(inc, cause=cause, confidence=conf or 0.0,
                         recovery=recovery, restart_checkpoint_step=restart))  # fmt: skip
    return dataclasses.replace(det, incidents=incidents), verdicts


def incidents_frame(store: Store, run_id: str) -> pl.DataFrame:
    return store.query("SELECT * FROM incidents WHERE run_id = ? ORDER BY incident_id", [run_id])


JSON_FIELDS = (
    "id",
    "metric",
    "onset_step",
    "peak_step",
    "end_step",
    "pre_value",
    "peak_value",
    "post_value",
    "grad_norm_peak",
    "type",
    "cause",
    "confidence",
    "evidence",
    "recovery",
    "restart_checkpoint_step",
    "peaks",
    "features",
    "replay",
    "recovery_step",
    "steps_lost",
    "tokens_lost",
    "gpu_hours_lost",
    "cost_usd",
    "severity",
    "lr_phase",
    "lr_at_onset",
    "lr_peak_step",
    "grad_norm_peak_step",
    "grad_norm_baseline",
    "seconds_per_step",
    "tokens_per_step",
    "world_size",
)


def incidents_json(store: Store, run_id: str) -> dict[str, Any]:
    """The run's incidents as the `incidents.json` document (from the stored rows)."""
    out = []
    for row in incidents_frame(store, run_id).iter_rows(named=True):
        row["id"] = row.pop("incident_id")
        for key in ("peaks", "evidence", "features"):
            row[key] = json.loads(row[key]) if row[key] else ([] if key != "features" else {})
        out.append({k: to_json(row.get(k)) for k in JSON_FIELDS})
    near = store.query(
        "SELECT step, metric, value, baseline, ratio, detail FROM near_misses "
        "WHERE run_id = ? ORDER BY step",
        [run_id],
    )
    cost = store.query("SELECT * EXCLUDE (run_id) FROM run_cost WHERE run_id = ?", [run_id])
    totals = to_json(cost.to_dicts()[0]) if cost.height else None
    rollbacks = store.query(
        "SELECT * EXCLUDE (run_id) FROM rollbacks WHERE run_id = ? "
        "ORDER BY resumed_step, source, attempt",
        [run_id],
    )
    return {
        "run": run_id,
        "incidents": out,
        "totals": totals,
        "near_misses": to_json(near.to_dicts()),
        "rollbacks": to_json(rollbacks.to_dicts()),
    }


def write_json(store: Store, run_id: str, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(incidents_json(store, run_id), indent=2) + "\n")
    return path
