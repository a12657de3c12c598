"""What the screen did not look at, stored so that a report never calls it clean.

The loss screen screens the start-up of a run (its first points, and the initial descent,
where the loss and the fp16 loss scale legitimately jump) less: only for jumps to twice the
level of the 3 points before and, after its first steps, for spikes that stand out on both
sides (screen.startup_spikes); a log with fewer than three finite loss points is not
screened at all. That is a decision of detect, so detect stores
it, one row per run in `screen_coverage`:

    run_id, metric, points (finite logged loss points), first_step, last_step,
    screened_from_step (first step the screen judged; NULL when none), unscreened_points,
    unscreened_to_step (last step left out), short_log (fewer points than the normal
    start-up needs), note (one sentence).

Non-finite values, gradient norms and the loss scale are checked everywhere, start-up
included; the note says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from forensics.detect.config import DetectConfig
from forensics.store import Store

TABLE = "screen_coverage"  # declared with the other detect tables in forensics/store/schema.py


@dataclass(frozen=True)
class Coverage:
    metric: str
    points: int
    first_step: int | None
    last_step: int | None
    screened_from_step: int | None
    unscreened_points: int
    unscreened_to_step: int | None
    short_log: bool
    both_sides_from_step: int | None = None  # from here start-up was screened both sides too
    # the both-sides test's bar: a rise of this much and this many start-up noise scales
    spike_rise: float = math.expm1(DetectConfig.rise_min)
    spike_z: float = DetectConfig.z_min

    @property
    def note(self) -> str:
        if self.screened_from_step is None:
            return (
                f"the {self.metric} curve was not screened ({self.points} finite points); "
                "only non-finite values, gradient norms and the loss scale were checked"
            )
        if not self.unscreened_points:
            return f"every logged {self.metric} point was screened"
        size = "a short log: " if self.short_log else ""
        both = ""
        if self.both_sides_from_step is not None:
            both = (
                f" and, from step {self.both_sides_from_step}, for spikes at least "
                f"{self.spike_rise:.0%} and {self.spike_z:g} noise scales above the loss on "
                "both sides (the points before them and where it came back to)"
            )
        return (
            f"{size}the first {self.unscreened_points} of {self.points} logged {self.metric} "
            f"points (steps {self.first_step}-{self.unscreened_to_step}, {self._what}) were "
            f"screened only for jumps to twice the level of the 3 points before{both}, not "
            "for smaller spikes or rises that stayed; non-finite values were checked there too"
        )

    @property
    def _what(self) -> str:
        """`start-up`, or for a log that starts well into a run (an excerpt from step 642,
        twice or more the unscreened stretch's length), the history the screen needs."""
        first, last = self.first_step, self.unscreened_to_step
        if first is not None and last is not None and first > 2 * max(1, last - first + 1):
            return f"the history the screen needs: the log starts at step {first}"
        return "start-up"


def write(store: Store, run_id: str, cov: Coverage) -> None:
    """Replace the run's coverage row."""
    with store.transaction():
        store.con.execute(f"DELETE FROM {TABLE} WHERE run_id = ?", [run_id])
        row = {
            "run_id": run_id,
            "metric": cov.metric,
            "points": cov.points,
            "first_step": cov.first_step,
            "last_step": cov.last_step,
            "screened_from_step": cov.screened_from_step,
            "unscreened_points": cov.unscreened_points,
            "unscreened_to_step": cov.unscreened_to_step,
            "short_log": cov.short_log,
            "note": cov.note,
        }
        store.con.register("_coverage_row", pl.DataFrame([row]))
        try:
            store.con.execute(f"INSERT INTO {TABLE} BY NAME SELECT * FROM _coverage_row")
        finally:
            store.con.unregister("_coverage_row")


def read(store: Store, run_id: str) -> dict[str, object] | None:
    """The run's coverage row as a dict (None when detect has not run)."""
    rows = store.query(f"SELECT * FROM {TABLE} WHERE run_id = ?", [run_id]).to_dicts()
    return rows[0] if rows else None
