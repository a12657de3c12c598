"""Replay verdicts that survive a new detection of the same incidents.

Detect replaces a run's incidents, and their replays go with them (a verdict must never be
shown beside an incident it did not test). But a cross-run detection (`forensics compare`,
or analysing a folder into a `--db` that already holds other runs) re-detects runs that
nobody asked to change: when an incident comes back at the same place (onset, peak and end
steps: everything replay's plan is made from), the replay that tested it still tested it,
so its rows are re-attached to the new incident id and the verdicts re-applied. Minutes of
GPU replay are not thrown away for a table that only gained cross-run evidence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from forensics.store.db import Store

Location = tuple[int, int, int | None]  # onset, peak, end step
T = TypeVar("T")

REPLAY_COLUMNS = ("probe", "hypothesis", "verdict", "numbers", "detail", "device", "wall_s",
                  "replayed_at")  # fmt: skip


@dataclass
class Kept:
    """The replay rows of every replayed incident, by run and incident location."""

    rows: dict[tuple[str, Location], list[tuple[Any, ...]]] = field(default_factory=dict)
    restored: dict[str, int] = field(default_factory=dict)  # run -> incidents re-attached
    lost: dict[str, int] = field(default_factory=dict)  # run -> incidents that moved

    def note(self) -> str | None:
        """One line for the user when some replays could not be kept, else None."""
        if not self.lost:
            return None
        runs = ", ".join(f"{r} ({n})" for r, n in sorted(self.lost.items()))
        kept = sum(self.restored.values())
        return (
            f"replay verdicts of {sum(self.lost.values())} incident(s) dropped because the new "
            f"detection moved them: {runs}; run `forensics replay --db DB --run RUN` again "
            f"(kept {kept} incident(s) detected where they were)"
        )


def keep(store: Store) -> Kept:
    """Read every replayed incident's replay rows with its location, before detect runs."""
    cols = ", ".join(f"r.{c}" for c in REPLAY_COLUMNS)
    found = store.con.execute(
        f"SELECT r.run_id, i.onset_step, i.peak_step, i.end_step, {cols} FROM replays r "
        "JOIN incidents i USING (run_id, incident_id) ORDER BY r.run_id, r.incident_id"
    ).fetchall()
    kept = Kept()
    for run_id, onset, peak, end, *rest in found:
        kept.rows.setdefault((run_id, (onset, peak, end)), []).append(tuple(rest))
    return kept


def restore(store: Store, kept: Kept) -> Kept:
    """Re-attach the kept rows to the incidents detected at the same location, re-apply the
    verdicts of every run that got some back, and count the incidents that moved."""
    from forensics.replay.verdicts import apply_verdicts

    now = {
        (run_id, (onset, peak, end)): iid
        for run_id, iid, onset, peak, end in store.con.execute(
            "SELECT run_id, incident_id, onset_step, peak_step, end_step FROM incidents"
        ).fetchall()
    }
    marks = ", ".join("?" for _ in REPLAY_COLUMNS)
    with store.transaction() as con:
        for (run_id, where), rows in kept.rows.items():
            iid = now.get((run_id, where))
            if iid is None:
                kept.lost[run_id] = kept.lost.get(run_id, 0) + 1
                continue
            con.execute("DELETE FROM replays WHERE run_id = ? AND incident_id = ?", [run_id, iid])
            for row in rows:
                con.execute(
                    f"INSERT INTO replays (run_id, incident_id, {', '.join(REPLAY_COLUMNS)}) "
                    f"VALUES (?, ?, {marks})",
                    [run_id, iid, *row],
                )
            kept.restored[run_id] = kept.restored.get(run_id, 0) + 1
    for run_id in kept.restored:
        apply_verdicts(store, run_id)
    return kept


def redetect(store: Store, detect: Callable[[], T]) -> tuple[T, str | None]:
    """Run `detect` (a re-detection of the store's runs) keeping the replays of incidents it
    finds where they were; its result and the note on those it moved (Kept.note)."""
    kept = keep(store)
    out = detect()
    return out, restore(store, kept).note()
