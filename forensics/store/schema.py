"""DDL of the run store. docs/schema.md documents every table; keep the two in step.

Each stage owns its tables (ingest: runs..token_counts; detect: incidents, findings,
near_misses; replay: replays) but all DDL lives here so the schema has one home.
Columns are only ever added, never renamed, so older databases stay readable (the one
exception, `metrics` becoming a view in schema 2, is migrated by Store._ensure_schema).
"""

from __future__ import annotations

import hashlib
import re

# 2: `metrics` became a view over metric_columns + metric_rows (was a table).
# 3: `source_fingerprints` (a source's identity beside its real path) and `conflicts`.
SCHEMA_VERSION = 3

INGEST_DDL = [
    """CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS runs (
        run_id VARCHAR PRIMARY KEY,
        name VARCHAR NOT NULL,
        source_path VARCHAR,
        format VARCHAR,
        config JSON,
        ingested_at TIMESTAMP
    )""",
    """CREATE TABLE IF NOT EXISTS sources (
        run_id VARCHAR NOT NULL,
        path VARCHAR NOT NULL,
        kind VARCHAR NOT NULL,
        format VARCHAR,
        bytes BIGINT,
        rows BIGINT,
        warnings JSON,
        ingested_at TIMESTAMP,
        PRIMARY KEY (run_id, path)
    )""",
    # A source's content fingerprint (forensics/ingest/identity.py), beside `sources` rather
    # than in it so that code inserting into `sources` by position keeps working.
    """CREATE TABLE IF NOT EXISTS source_fingerprints (
        run_id VARCHAR NOT NULL,
        path VARCHAR NOT NULL,
        fingerprint VARCHAR NOT NULL,
        PRIMARY KEY (run_id, path)
    )""",
    # Values that lost to another for the same (run, step, metric): forensics/store/conflicts.py
    """CREATE TABLE IF NOT EXISTS conflicts (
        run_id VARCHAR NOT NULL,
        step BIGINT NOT NULL,
        metric VARCHAR NOT NULL,
        value DOUBLE,
        wall_time DOUBLE,
        raw_name VARCHAR NOT NULL,
        source VARCHAR NOT NULL,
        kept_value DOUBLE,
        kept_raw_name VARCHAR,
        kept_source VARCHAR,
        rule VARCHAR
    )""",
    # `metrics` is a view over these two (METRICS_VIEW): see forensics/store/blocks.py.
    """CREATE TABLE IF NOT EXISTS metric_columns (
        block_id INTEGER NOT NULL,
        slot INTEGER NOT NULL,
        run_id VARCHAR NOT NULL,
        source VARCHAR NOT NULL,
        metric VARCHAR NOT NULL,
        raw_name VARCHAR NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS metric_rows (
        block_id INTEGER NOT NULL,
        step BIGINT NOT NULL,
        wall_time DOUBLE,
        vals DOUBLE[] NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS events (
        run_id VARCHAR NOT NULL,
        step BIGINT,
        kind VARCHAR NOT NULL,
        detail VARCHAR,
        source VARCHAR NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS checkpoints (
        run_id VARCHAR NOT NULL,
        step BIGINT,
        path VARCHAR NOT NULL,
        format VARCHAR NOT NULL,
        has_optimizer BOOLEAN,
        bytes BIGINT,
        n_params BIGINT,
        n_tensors BIGINT,
        dtype VARCHAR,
        model_config JSON,
        reference_model BOOLEAN,
        source VARCHAR NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS checkpoint_stats (
        run_id VARCHAR NOT NULL,
        step BIGINT,
        param VARCHAR NOT NULL,
        numel BIGINT,
        param_norm DOUBLE,
        exp_avg_norm DOUBLE,
        exp_avg_sq_mean DOUBLE,
        exp_avg_sq_max DOUBLE,
        adam_step DOUBLE,
        nonfinite BIGINT,
        source VARCHAR NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS batches (
        run_id VARCHAR NOT NULL,
        step BIGINT NOT NULL,
        source VARCHAR,
        micro INTEGER,
        sample_index BIGINT,
        token_offset BIGINT,
        n_tokens BIGINT,
        seq_len INTEGER,
        extra JSON,
        manifest VARCHAR NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS token_shards (
        run_id VARCHAR NOT NULL,
        path VARCHAR NOT NULL,
        dtype VARCHAR,
        header_bytes BIGINT,
        n_tokens BIGINT,
        bytes BIGINT,
        source VARCHAR NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS token_counts (
        run_id VARCHAR NOT NULL,
        token INTEGER NOT NULL,
        count BIGINT NOT NULL,
        source VARCHAR NOT NULL
    )""",
]

DETECT_DDL = [
    # What the spike screen did not judge (forensics/detect/coverage.py), one row per run.
    """CREATE TABLE IF NOT EXISTS screen_coverage (
        run_id VARCHAR, metric VARCHAR, points BIGINT, first_step BIGINT, last_step BIGINT,
        screened_from_step BIGINT, unscreened_points BIGINT, unscreened_to_step BIGINT,
        short_log BOOLEAN, note VARCHAR
    )""",
    # Metrics the run logs that detection does not read: NaN/Inf at most of their steps
    # while the loss is finite (forensics/detect/unread.py), one row per metric.
    """CREATE TABLE IF NOT EXISTS unread_metrics (
        run_id VARCHAR, metric VARCHAR, points BIGINT, nonfinite BIGINT, first_step BIGINT,
        note VARCHAR
    )""",
    # The compute the run lost to its incidents, each step counted once (detect/recovery.py
    # run_cost), one row per run.
    """CREATE TABLE IF NOT EXISTS run_cost (
        run_id VARCHAR, incidents INTEGER, steps_lost BIGINT, overlap_steps BIGINT,
        tokens_lost DOUBLE, gpu_hours_lost DOUBLE, cost_usd DOUBLE
    )""",
    # Attempts the run went back from (a resume that logged steps again, in the same file or
    # a later one), each with its worst incident and what the run did at that step
    # (detect/rollbacks.py).
    """CREATE TABLE IF NOT EXISTS rollbacks (
        run_id VARCHAR NOT NULL, source VARCHAR NOT NULL, attempt INTEGER,
        resumed_step BIGINT, abandoned_step BIGINT, again_from_step BIGINT, steps_again BIGINT,
        loss_points BIGINT,
        nonfinite_points BIGINT, first_nonfinite_step BIGINT, incident_type VARCHAR,
        onset_step BIGINT, peak_step BIGINT, peak_value DOUBLE, trend_value DOUBLE,
        run_value DOUBLE, run_incident_id INTEGER
    )""",
    """CREATE TABLE IF NOT EXISTS incidents (
        run_id VARCHAR NOT NULL,
        incident_id INTEGER NOT NULL,
        metric VARCHAR,
        onset_step BIGINT,
        peak_step BIGINT,
        end_step BIGINT,
        pre_value DOUBLE,
        peak_value DOUBLE,
        post_value DOUBLE,
        grad_norm_peak DOUBLE,
        type VARCHAR,
        cause VARCHAR,
        confidence DOUBLE,
        recovery VARCHAR,
        restart_checkpoint_step BIGINT,
        peaks JSON,
        evidence JSON,
        features JSON,
        replay VARCHAR DEFAULT 'not_run',
        steps_lost BIGINT,
        tokens_lost DOUBLE,
        gpu_hours_lost DOUBLE,
        cost_usd DOUBLE,
        detected_at TIMESTAMP,
        PRIMARY KEY (run_id, incident_id)
    )""",
    """CREATE TABLE IF NOT EXISTS findings (
        run_id VARCHAR NOT NULL,
        incident_id INTEGER NOT NULL,
        rule_id VARCHAR NOT NULL,
        cause VARCHAR NOT NULL,
        triggered BOOLEAN NOT NULL,
        confidence DOUBLE,
        recovery VARCHAR,
        evidence JSON,
        replay VARCHAR DEFAULT 'not_run'
    )""",
    """CREATE TABLE IF NOT EXISTS near_misses (
        run_id VARCHAR NOT NULL,
        step BIGINT NOT NULL,
        metric VARCHAR NOT NULL,
        value DOUBLE,
        baseline DOUBLE,
        ratio DOUBLE,
        detail VARCHAR
    )""",
]

# Added by issue 11 (additive): what detect decides once and the report only renders
# (docs/definitions.md). Older databases gain them on open (ADDED_COLUMNS below).
INCIDENT_COLUMNS_V3 = {
    "recovery_step": "BIGINT",
    "severity": "VARCHAR",
    "lr_phase": "VARCHAR",
    "lr_at_onset": "DOUBLE",
    "lr_peak_step": "BIGINT",
    "grad_norm_peak_step": "BIGINT",
    "grad_norm_baseline": "DOUBLE",
    "seconds_per_step": "DOUBLE",
    "tokens_per_step": "DOUBLE",
    "world_size": "DOUBLE",
}

# Issue 15 (additive): each cause's status for each incident, what to log next, and the
# spikes that recur across the runs of the store (forensics/detect/evidence.py, recurrence.py).
EXPLAIN_DDL = [
    """CREATE TABLE IF NOT EXISTS hypotheses (
        run_id VARCHAR NOT NULL,
        incident_id INTEGER NOT NULL,
        rank INTEGER NOT NULL,
        cause VARCHAR NOT NULL,
        status VARCHAR NOT NULL,
        confidence DOUBLE,
        rule_id VARCHAR,
        reason VARCHAR,
        needs JSON,
        evidence JSON
    )""",
    """CREATE TABLE IF NOT EXISTS log_next (
        run_id VARCHAR NOT NULL,
        incident_id INTEGER NOT NULL,
        rank INTEGER NOT NULL,
        metric VARCHAR NOT NULL,
        separates JSON,
        why VARCHAR
    )""",
    """CREATE TABLE IF NOT EXISTS recurrences (
        recurrence_id INTEGER NOT NULL,
        step BIGINT NOT NULL,
        run_id VARCHAR NOT NULL,
        peak_step BIGINT NOT NULL,
        n_runs INTEGER NOT NULL,
        n_covering INTEGER,
        shared_data_order BOOLEAN,
        by_chance DOUBLE,
        absent_runs JSON
    )""",
]

REPLAY_DDL = [
    """CREATE TABLE IF NOT EXISTS replays (
        run_id VARCHAR NOT NULL,
        incident_id INTEGER NOT NULL,
        probe VARCHAR NOT NULL,
        hypothesis VARCHAR NOT NULL,
        verdict VARCHAR NOT NULL,
        numbers JSON,
        detail VARCHAR,
        device VARCHAR,
        wall_s DOUBLE,
        replayed_at TIMESTAMP
    )""",
    # Issue 15 (additive): the causes replay confirmed for an incident, with their role
    # (trigger, amplifier, or the sole cause) and the share of the damage each one's
    # counterfactual removes (forensics/replay/verdicts.py; docs/replay.md).
    """CREATE TABLE IF NOT EXISTS contributions (
        run_id VARCHAR NOT NULL,
        incident_id INTEGER NOT NULL,
        cause VARCHAR NOT NULL,
        role VARCHAR NOT NULL,
        share_removed DOUBLE,
        probe VARCHAR NOT NULL,
        measure VARCHAR
    )""",
]

# The long form every stage reads: one row per (run, series, step). A view, so that a
# value costs its 8 bytes plus a share of its record's step and wall time, not a row with
# four strings (docs/schema.md says why). `slot` is 1-based, like DuckDB lists.
METRICS_VIEW = """CREATE OR REPLACE VIEW metrics AS
    SELECT c.run_id, r.step, c.metric, r.vals[c.slot] AS value, r.wall_time, c.raw_name,
        c.source
    FROM metric_columns c JOIN metric_rows r USING (block_id)"""

# Columns added after a table was first shipped: (table, column, type). `CREATE TABLE IF
# NOT EXISTS` leaves an older database's table as it was, so Store._ensure_schema adds
# these with `ADD COLUMN IF NOT EXISTS` (additive, so any stage may append here).
ADDED_COLUMNS: list[tuple[str, str, str]] = [
    ("incidents", name, kind) for name, kind in INCIDENT_COLUMNS_V3.items()
] + [
    # replay decided every cause the metric would have separated (replay/verdicts.py): the
    # report no longer asks for it
    ("log_next", "settled_by_replay", "BOOLEAN DEFAULT false"),
    # a value a resume wrote over in the same file (rule conflicts.REWOUND): the file
    # segment it was logged in, counted from 0 where the series' step goes back
    ("conflicts", "attempt", "INTEGER"),
    # a run that spikes there too but tracks this recurrence's run `repeat_of` before the
    # step (detect/recurrence.tracks): that run repeated, not one of its n_runs
    ("recurrences", "repeat_of", "VARCHAR"),
]

ALL_DDL = INGEST_DDL + [METRICS_VIEW] + DETECT_DDL + EXPLAIN_DDL + REPLAY_DDL

# Tables whose rows belong to one source file of a run: re-ingesting that file replaces them.
# (Metric values, in metric_columns/metric_rows, are cleared by Store.clear_source itself.)
PER_SOURCE_TABLES = [
    "events",
    "checkpoints",
    "checkpoint_stats",
    "batches",
    "token_shards",
    "token_counts",
]


def create_statements() -> list[str]:
    """ALL_DDL with each table's ADDED_COLUMNS written into its CREATE TABLE, after its own
    columns (where ALTER TABLE ADD COLUMN puts them on an older store), so that a new store
    is made without one ALTER per added column."""
    added: dict[str, list[str]] = {}
    for table, column, kind in ADDED_COLUMNS:
        added.setdefault(table, []).append(f"{column} {kind}")
    out = []
    for ddl in ALL_DDL:
        m = _CREATE_TABLE.match(ddl)
        if m and m.group(1) in added:
            body = ddl.rstrip()
            assert body.endswith(")"), ddl
            ddl = (
                body[:-1].rstrip()
                + ",\n        "
                + ",\n        ".join(added[m.group(1)])
                + "\n    )"
            )
        out.append(ddl)
    return out


_CREATE_TABLE = re.compile(r"\s*CREATE TABLE IF NOT EXISTS (\w+) \(")


def schema_marker(views: str) -> str:
    """A fingerprint of the whole schema this code creates (every statement, and the wide
    view of `views`), kept in `meta`: a store that holds it needs no DDL on open."""
    text = "\n;\n".join([str(SCHEMA_VERSION), *ALL_DDL, repr(ADDED_COLUMNS), views])
    return hashlib.sha256(text.encode()).hexdigest()


def wide_view_sql(metric_names: list[str]) -> str:
    """`metrics_wide`: one row per (run, step), one column per canonical scalar metric.

    `first()` keeps a NaN as NaN (max() would rank it above every number).
    """
    cols = ",\n        ".join(
        f"first(value) FILTER (WHERE metric = '{m}') AS \"{m}\"" for m in metric_names
    )
    return f"""CREATE OR REPLACE VIEW metrics_wide AS
    SELECT run_id, step, min(wall_time) AS wall_time,
        {cols}
    FROM metrics GROUP BY run_id, step"""
