"""The Recovery action section: the recommendation in words, with its numbers filled in.

The detector names an action (`incidents.recovery`); lessons.yaml holds its text as a Jinja
template; this module supplies the numbers the text needs: k batches and their steps,
the checkpoint to restart from, the learning rate at the onset.
"""

from __future__ import annotations

from dataclasses import dataclass

import jinja2
import polars as pl

from forensics.detect.recovery import skip_mechanism, skip_steps
from forensics.report import incident
from forensics.report.knowledge import Entry, Knowledge
from forensics.report.model import Incident

DEFAULT_ACTION = {"1": "continue", "2": "continue", "3": "restart_from_checkpoint"}


@dataclass
class Action:
    """One recommendation: its short title, the instruction, the reason, who said so."""

    title: str
    text: str
    why: str
    source: str  # where the recommendation came from


def recommend(
    inc: Incident,
    f: incident.Facts,
    frame: pl.DataFrame,
    kb: Knowledge,
    env: jinja2.Environment,
    kind: Entry,
    writer: str | None = None,
) -> Action:
    """The recommendation in words, with its numbers (k batches, checkpoint, LR) filled in.
    `writer`: the run's `runs.format`, which says how that writer skips batches."""
    entry, source = kb.action(inc.recovery), "the detector"
    if entry is None and inc.recovery:
        return Action(
            inc.recovery, f"`{inc.recovery}`.", f"no text for this action in {kb.source}.", source
        )
    if entry is None:
        entry = kb.action(DEFAULT_ACTION.get(kind.key, "continue"))
        source = f"the default for a {kind.name} incident (the detector stored none)"
    assert entry is not None, f"{kb.source} must define continue and restart_from_checkpoint"
    first, last = skip_steps(inc.recovery, inc.onset_step, inc.peak_step)
    params = {
        "k": last - first + 1,
        "first": first,
        "last": last,
        "skip": skip_mechanism(writer),
        **_stored_rows(inc, first, last),
        "ckpt": inc.restart_checkpoint_step,
        "lr": inc.lr_at_onset,
        "onset": inc.onset_step,
        "peak": inc.peak_step,
        "recovery": inc.recovery_step,
        "cause": None if kb.cause(inc.cause).key == "unknown" else kb.cause(inc.cause).title,
    }
    text = " ".join(env.from_string(entry.text).render(params).split())
    why = " ".join(env.from_string(entry.why).render(params).split())
    return Action(entry.title, text, why, source)


def _stored_rows(inc: Incident, first: int, last: int) -> dict[str, object]:
    """The dataset rows replay stored for the skipped steps (`dataset_rows` of the
    data_corruption row): `rows` when every step first..last has them, else None."""
    stored = next((r.numbers for r in inc.replays if r.numbers.get("dataset_rows")), {})
    by_step = stored.get("dataset_rows") or {}
    if not all(str(t) in by_step for t in range(first, last + 1)):
        return {"rows": None, "dataset": None}
    rows = sorted({int(i) for t in range(first, last + 1) for i in by_step[str(t)]})
    return {"rows": rows, "dataset": stored.get("dataset_name")}
