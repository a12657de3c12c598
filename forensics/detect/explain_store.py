"""Store what evidence.py and recurrence.py decided: `hypotheses`, `log_next`, `recurrences`.

Written after detect/store.py has replaced the run's incidents, and replaced the same way
(the run's rows deleted and rewritten in one transaction), so the tables always describe
the incidents stored beside them. The report renders them; it derives nothing.
"""

from __future__ import annotations

import json

from forensics.detect.model import Detection
from forensics.nonfinite import to_json
from forensics.store import Store

EXPLAIN_TABLES = ("hypotheses", "log_next")


def write(store: Store, det: Detection) -> None:
    """Replace the run's hypotheses and log-next rows with those of `det`."""
    hyps = [
        (
            det.run_id,
            inc.id,
            h.rank,
            h.cause,
            h.status,
            h.confidence,
            h.rule_id,
            h.reason,
            json.dumps(h.needs),
            json.dumps(to_json([e.as_dict() for e in h.evidence])),
        )
        for inc in det.incidents
        for h in inc.hypotheses
    ]
    nxt = [
        (det.run_id, inc.id, rank, n.metric, json.dumps(n.separates), n.why)
        for inc in det.incidents
        for rank, n in enumerate(inc.log_next, 1)
    ]
    with store.transaction():
        for table in EXPLAIN_TABLES:
            store.con.execute(f"DELETE FROM {table} WHERE run_id = ?", [det.run_id])
        if hyps:
            store.con.executemany(
                "INSERT INTO hypotheses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", hyps
            )
        if nxt:
            store.con.executemany(
                "INSERT INTO log_next (run_id, incident_id, rank, metric, separates, why) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                nxt,
            )
