"""Several values for one (run, step, metric): keep one by a fixed rule, keep the rest visible.

A run's sources can disagree: a resumed run split over two files logs the overlapping steps
twice, a `metrics.jsonl` sits beside the `log.csv` of the same run, one record holds both
`loss` and its alias `train/loss`. Storing all of them would give a step two losses (and
move an incident's end); silently keeping one would hide evidence. So after every ingest
of a run, each (step, metric) logged more than once keeps exactly one value in `metrics`,
chosen by this precedence (first difference decides):

0. the recorder's `forensics/metrics.jsonl` (forensics.record) beats every other source: it
   holds each step's exact value measured in the training process, where the trainer's own
   logs average or round it (trainer_state.json averages the loss over logging_steps);
1. a structured source (JSONL, CSV, TensorBoard, trainer_state.json, ...) beats a text log
   (its numbers are printed, rounded, and parsed back by a regex);
2. a canonical name (`loss`) beats an alias (`train/loss`) of the same metric;
3. the later resume segment beats the earlier: the series whose first logged step is
   larger was written after the other resumed, so its overlapping steps are the ones the
   run continued from;
4. then, only to be deterministic, the larger source path and raw name.

Every other value moves to the `conflicts` table, beside the value kept and the rule that
decided, and the ingest warns with counts. Before an ingest the losers of earlier ingests
are put back (`restore`), so re-ingesting any source of the run decides again from all
values, and nothing is lost or stored twice however often a run is ingested.

One file can log a step twice too: a run resumed from a checkpoint appends to its log, and
the steps after the checkpoint come again. Ingest keeps the later value (the run went on
from it) and stores the earlier one here under rule REWOUND, with the file segment it was
logged in (`attempt`); a step the file logs again at once (a progress bar redrawn, one line
per rank) keeps its earlier values under rule REPEATED. Those are decided once, by the
file's own order, so `restore` leaves them alone; they leave with their source
(Store.clear_source).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

_DUPS = "_forensics_dups"
# what forensics.record writes (forensics/record/recorder.py: FOLDER/METRICS), any separator
RECORDER_PATH = r"(^|[/\\])forensics[/\\]metrics\.jsonl$"
_KEEP = "_forensics_keep"
# the rule of a value a resume wrote over in the same file (ingest/pipeline.py)
REWOUND = "rewound in this file"
# the rule of a value the same file logged again at once (a redrawn bar, one line per rank)
REPEATED = "repeated in this file"
# what the file's own order decided at ingest: `restore` leaves these alone
_IN_FILE = (REWOUND, REPEATED)
# the rule of a value a later resume segment (another file) wrote over: `resolve` below
RESUMED = "later resume segment"
# the values of an attempt the run went back from (detect/rollbacks.py), as SQL `rule IN ...`
ATTEMPT_RULES = f"rule IN {(REWOUND, RESUMED)!r}"


@dataclass
class Conflict:
    """Per losing (source, kept source, rule): how many values and their step range."""

    source: str
    kept_source: str
    rule: str
    values: int
    first_step: int
    last_step: int
    differing: int  # values that differ from the one kept, as float32 (the rest are repeats)
    rounded: int = 0  # values equal to the one kept only as float32 (an event file's copy)

    def warning(self) -> str:
        """The line the losing source's ingest shows."""
        equal = "all equal to those kept" if not self.differing else f"{self.differing} differ"
        if not self.differing and self.rounded:
            equal += " to float32 precision, as an event file stores them"
        other = (
            "under another name in this file"
            if self.source == self.kept_source
            else (f"by {self.kept_source}")
        )
        return (
            f"{self.values} values at steps {self.first_step}..{self.last_step} were also "
            f"logged {other} ({equal}): kept one per (step, metric) by rule '{self.rule}'; "
            "this file's are in table `conflicts`"
        )


def restore(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Put the run's earlier losers back among its values (one single-column block per
    series) and empty its `conflicts`, so that the next `resolve` decides from everything."""
    contest = f"run_id = ? AND rule NOT IN {_IN_FILE!r}"
    (n,) = con.execute(f"SELECT count(*) FROM conflicts WHERE {contest}", [run_id]).fetchall()[0]
    if not n:
        return
    base = _next_block_id(con)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {_KEEP} AS SELECT c.*, {base} - 1 + dense_rank() OVER "
        f"(ORDER BY source, raw_name, metric) AS new_id FROM conflicts c WHERE {contest}",
        [run_id],
    )
    try:
        con.execute(
            "INSERT INTO metric_columns SELECT DISTINCT new_id, 1, run_id, source, metric, "
            f"raw_name FROM {_KEEP}"
        )
        con.execute(f"INSERT INTO metric_rows SELECT new_id, step, wall_time, [value] FROM {_KEEP}")
        con.execute(f"DELETE FROM conflicts WHERE {contest}", [run_id])
    finally:
        con.execute(f"DROP TABLE IF EXISTS {_KEEP}")


def resolve(
    con: duckdb.DuckDBPyConnection, run_id: str, text_formats: frozenset[str]
) -> list[Conflict]:
    """Keep one value per (step, metric) of the run by the module's precedence; move the
    others to `conflicts`. `text_formats`: the readers whose numbers are parsed from printed
    text (forensics.ingest.base.Reader.structured is False). Cheap when no metric has two
    series (the usual case)."""
    metrics = [
        r[0]
        for r in con.execute(
            "SELECT metric FROM metric_columns WHERE run_id = ? GROUP BY metric "
            "HAVING count(DISTINCT (source, raw_name)) > 1",
            [run_id],
        ).fetchall()
    ]
    if not metrics:
        return []
    texts = list(text_formats) or [""]
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {_DUPS} AS "
        "WITH series AS (SELECT c.block_id, c.slot, c.source, c.metric, c.raw_name, r.step, "
        "r.wall_time, r.vals[c.slot] AS value FROM metric_columns c JOIN metric_rows r "
        "USING (block_id) WHERE c.run_id = $run AND list_contains($metrics, c.metric)), "
        "ranked AS (SELECT s.*, "
        "regexp_matches(s.source, $recorder) AS recorded, "
        "coalesce(NOT list_contains($texts, src.format), true) AS structured, "
        "s.raw_name = s.metric AS canonical, "
        "min(s.step) OVER (PARTITION BY s.source, s.raw_name, s.metric) AS segment, "
        "count(*) OVER (PARTITION BY s.metric, s.step) AS n "
        "FROM series s LEFT JOIN sources src ON src.run_id = $run AND src.path = s.source) "
        "SELECT *, row_number() OVER (PARTITION BY metric, step ORDER BY recorded DESC, "
        "structured DESC, "
        "canonical DESC, segment DESC, source DESC, raw_name DESC) AS pick "
        "FROM ranked WHERE n > 1",
        {"run": run_id, "metrics": metrics, "texts": texts, "recorder": RECORDER_PATH},
    )
    try:
        return _move_losers(con, run_id)
    finally:
        con.execute(f"DROP TABLE IF EXISTS {_DUPS}")
        con.execute(f"DROP TABLE IF EXISTS {_KEEP}")


def _move_losers(con: duckdb.DuckDBPyConnection, run_id: str) -> list[Conflict]:
    (n,) = con.execute(f"SELECT count(*) FROM {_DUPS} WHERE pick > 1").fetchall()[0]
    if not n:
        return []
    con.execute(
        "INSERT INTO conflicts (run_id, step, metric, value, wall_time, raw_name, source, "
        "kept_value, kept_raw_name, kept_source, rule) "
        "SELECT $run, l.step, l.metric, l.value, l.wall_time, l.raw_name, l.source, k.value, "
        "k.raw_name, k.source, CASE WHEN k.recorded <> l.recorded THEN 'recorder' "
        "WHEN k.structured <> l.structured THEN 'structured source' "
        "WHEN k.canonical <> l.canonical THEN 'canonical name' "
        f"WHEN k.segment <> l.segment THEN '{RESUMED}' ELSE 'path order' END "
        f"FROM {_DUPS} l JOIN {_DUPS} k ON k.metric = l.metric AND k.step = l.step "
        "AND k.pick = 1 WHERE l.pick > 1",
        {"run": run_id},
    )
    _drop_cells(con)
    rows = con.execute(
        "SELECT source, kept_source, rule, count(*), min(step), max(step), "
        "count(*) FILTER (value::FLOAT IS DISTINCT FROM kept_value::FLOAT AND NOT "
        "(isnan(value) AND isnan(kept_value))), "
        "count(*) FILTER (value IS DISTINCT FROM kept_value AND NOT (isnan(value) AND "
        "isnan(kept_value)) AND value::FLOAT IS NOT DISTINCT FROM kept_value::FLOAT) "
        f"FROM conflicts WHERE run_id = ? AND rule NOT IN {_IN_FILE!r} "
        "GROUP BY ALL ORDER BY ALL",
        [run_id],
    ).fetchall()
    return [Conflict(*r) for r in rows]


def _drop_cells(con: duckdb.DuckDBPyConnection) -> None:
    """Take the losing values out of their blocks: each stored row holding one is deleted,
    and that row's other values are written again as single-column blocks."""
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {_KEEP} AS "
        f"WITH hit AS (SELECT DISTINCT block_id, step FROM {_DUPS} WHERE pick > 1), "
        "cells AS (SELECT c.block_id, c.slot, c.run_id, c.source, c.metric, c.raw_name, "
        "r.step, r.wall_time, r.vals[c.slot] AS value FROM metric_rows r "
        "JOIN hit USING (block_id, step) JOIN metric_columns c USING (block_id)) "
        f"SELECT * FROM cells ANTI JOIN (SELECT block_id, slot, step FROM {_DUPS} "
        "WHERE pick > 1) l USING (block_id, slot, step)"
    )
    con.execute(
        "DELETE FROM metric_rows WHERE (block_id, step) IN "
        f"(SELECT DISTINCT block_id, step FROM {_DUPS} WHERE pick > 1)"
    )
    base = _next_block_id(con)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {_KEEP}_ids AS SELECT block_id, slot, "
        f"{base} - 1 + row_number() OVER (ORDER BY block_id, slot) AS new_id "
        f"FROM (SELECT DISTINCT block_id, slot FROM {_KEEP})"
    )
    try:
        con.execute(
            "INSERT INTO metric_columns SELECT DISTINCT i.new_id, 1, k.run_id, k.source, "
            f"k.metric, k.raw_name FROM {_KEEP} k JOIN {_KEEP}_ids i USING (block_id, slot)"
        )
        con.execute(
            "INSERT INTO metric_rows SELECT i.new_id, k.step, k.wall_time, [k.value] "
            f"FROM {_KEEP} k JOIN {_KEEP}_ids i USING (block_id, slot)"
        )
    finally:
        con.execute(f"DROP TABLE IF EXISTS {_KEEP}_ids")
    # blocks left without a row (every value lost) no longer describe anything
    con.execute(
        "DELETE FROM metric_columns WHERE block_id IN "
        f"(SELECT DISTINCT block_id FROM {_DUPS}) AND block_id NOT IN "
        f"(SELECT DISTINCT block_id FROM metric_rows WHERE block_id IN "
        f"(SELECT DISTINCT block_id FROM {_DUPS}))"
    )


def _next_block_id(con: duckdb.DuckDBPyConnection) -> int:
    (block_id,) = con.execute(
        "SELECT coalesce(max(block_id), 0) + 1 FROM metric_columns"
    ).fetchall()[0]
    return int(block_id)
