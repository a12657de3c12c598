"""Metrics a run logs that detection cannot read, stored so that no page calls them absent.

ms-swift's console (modelscope/ms-swift#2280) prints `'grad_norm': nan` at every step from
the second on while the loss trains down: the norm is not computed, the updates are not
skipped (a skipped step does not lower the loss). Read as logged, every step is a
non-finite gradient with a finite loss: an fp16 overflow at every step, an infinite
gradient ratio for every spike, and "the gradient norm was NaN/Inf at step 60" on a page
whose norm was NaN from step 2. A metric that is NaN/Inf at half or more of its logged
steps while the loss is finite there, from its first tenth on (a logger that never
computed it), tells nothing about any one incident: detection reads it as not logged and
stores why, one row per metric in `unread_metrics`:

    run_id, metric, points (logged steps), nonfinite (of them NaN/Inf with a finite loss),
    first_step (the first such step), note (one sentence).

A divergence's NaN gradient stays evidence: it comes with a NaN loss, or (Megatron skips
the NaN iterations and logs the forward loss) it starts where the run diverged, after a
stretch of finite norms, not in the log's first tenth.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import polars as pl

from forensics.detect.data import RunData

TABLE = "unread_metrics"  # declared with the other detect tables in forensics/store/schema.py
# Metrics whose values the rules read as evidence of one incident.
CHECKED = ("grad_norm", "param_norm", "update_norm", "adam_v_mean")
UNREAD_SHARE = 0.5  # of the logged steps NaN/Inf with a finite loss
FROM_THE_START = 0.1  # the first of them within this share of the logged steps
MIN_POINTS = 10  # fewer logged values say too little about the logger


@dataclass(frozen=True)
class Unread:
    metric: str
    points: int
    nonfinite: int
    first_step: int

    @property
    def note(self) -> str:
        return (
            f"`{self.metric}` is NaN/Inf at {self.nonfinite} of its {self.points} logged steps "
            f"(from step {self.first_step}) while the loss is finite there: a logger that "
            "does not compute it, not evidence of any incident; detection does not read it"
        )


def unread_metrics(data: RunData) -> list[Unread]:
    """The CHECKED metrics of `data` that are NaN/Inf, with a finite loss, at UNREAD_SHARE
    or more of their logged steps, the first within FROM_THE_START of them."""
    out = []
    for name in CHECKED:
        m = data.aux.get(name)
        if m is None or len(m) < MIN_POINTS or not len(data.loss):
            continue
        i = np.searchsorted(data.loss.steps, m.steps, side="right") - 1
        loss = np.where(i >= 0, data.loss.values[np.maximum(i, 0)], np.nan)
        bad = ~np.isfinite(m.values) & np.isfinite(loss)
        first = int(np.argmax(bad))  # 0 when none: the share test below fails then
        if first < FROM_THE_START * len(m) and bad.sum() >= UNREAD_SHARE * len(m):
            out.append(Unread(name, len(m), int(bad.sum()), int(m.steps[first])))
    return out


def without(data: RunData, unread: list[Unread]) -> RunData:
    """`data` without the unread metrics (the store keeps them: NaN is evidence of the logger)."""
    names = {u.metric for u in unread}
    return dataclasses.replace(data, aux={k: v for k, v in data.aux.items() if k not in names})


def rows(run_id: str, unread: list[Unread]) -> pl.DataFrame:
    return pl.DataFrame(
        [dataclasses.asdict(u) | {"run_id": run_id, "note": u.note} for u in unread],
        schema={
            "metric": pl.Utf8,
            "points": pl.Int64,
            "nonfinite": pl.Int64,
            "first_step": pl.Int64,
            "run_id": pl.Utf8,
            "note": pl.Utf8,
        },
    )
