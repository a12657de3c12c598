"""What one probe concluded, and how it is stored in the `replays` table.

A probe tests one hypothesis (a cause name from detection, or `reproduction` for the check
that the replay is faithful) and says confirmed / refuted / inconclusive with the numbers it
decided on. `numbers` must survive JSON, so non-finite floats are stored as the strings
"NaN", "Infinity", "-Infinity" (they are evidence: an overflow is an Infinity).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from forensics.nonfinite import to_json
from forensics.store.db import Store

CONFIRMED, REFUTED, INCONCLUSIVE, NOT_RUN = "confirmed", "refuted", "inconclusive", "not_run"
VERDICTS = (CONFIRMED, REFUTED, INCONCLUSIVE)
REPRODUCTION = "reproduction"  # hypothesis name of the `reproduce` row (not a cause)


@dataclass
class ReplayResult:
    """One row of `replays`: a probe's verdict on one hypothesis for one incident."""

    run_id: str
    incident_id: int
    probe: str
    hypothesis: str
    verdict: str
    numbers: dict[str, Any] = field(default_factory=dict)
    detail: str = ""
    device: str | None = None
    wall_s: float | None = None

    def __post_init__(self) -> None:
        assert self.verdict in VERDICTS, f"verdict must be one of {VERDICTS}, not {self.verdict}"


def write_results(store: Store, run_id: str, incident_id: int, rows: list[ReplayResult]) -> None:
    """Replace the incident's replay rows with `rows` in one transaction (re-running replaces)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    with store.transaction() as con:
        con.execute(
            "DELETE FROM replays WHERE run_id = ? AND incident_id = ?", [run_id, incident_id]
        )
        for r in rows:
            con.execute(
                "INSERT INTO replays (run_id, incident_id, probe, hypothesis, verdict, numbers, "
                "detail, device, wall_s, replayed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    r.run_id,
                    r.incident_id,
                    r.probe,
                    r.hypothesis,
                    r.verdict,
                    json.dumps(to_json(r.numbers)),
                    r.detail,
                    r.device,
                    r.wall_s,
                    now,
                ],
            )
