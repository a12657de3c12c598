"""The Recovery action section: the recommendation in words, with its numbers filled in.

The detector names an action (`incidents.recovery`); lessons.yaml holds its text as a Jinja
template; this module supplies the numbers the text needs: k batches and their steps,
the checkpoint to restart from, the learning rate at the onset.
"""

from __future__ import annotations

from dataclasses import dataclass

import jinja2
import polars as pl

from forensics.report import incident
from forensics.report.knowledge import Entry, Knowledge, action_argument
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
) -> Action:
    """The recommendation in words, with its numbers (k batches, checkpoint, LR) filled in."""
    entry, source = kb.action(inc.recovery), "the detector"
    if entry is None and inc.recovery:
        return Action(
            inc.recovery, f"`{inc.recovery}`.", f"no text for this action in {kb.source}.", source
        )
    if entry is None:
        entry = kb.action(DEFAULT_ACTION.get(kind.key, "continue"))
        source = f"the default for a {kind.name} incident (the detector stored none)"
    assert entry is not None, f"{kb.source} must define continue and restart_from_checkpoint"
    k = action_argument(inc.recovery) or (inc.peak_step - inc.onset_step + 1)
    params = {
        "k": k,
        "first": inc.onset_step,
        "last": inc.onset_step + k - 1,
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
