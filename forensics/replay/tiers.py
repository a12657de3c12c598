"""Which replay tier ran for a run, and what the next one needs: one line for the CLI.

Tier 1: the offending batch from the run's own data, with data probes (no model).
Tier 2: the bundled reference model, trained on the run's token stream, as an independent
judge of that batch (a proxy). Tier 3: the run's own model, re-trained from its checkpoint to
the offending step (reproduction, rare-token loss and gradient share, per-layer overflow...).
The line is derived from the stored probe rows only, so it cannot disagree with them.
"""

from __future__ import annotations

from collections.abc import Sequence

from forensics.replay.result import ReplayResult

NOT_RUN = ("not run", "offending batch unreadable", "no readable control batch")


def _ran(rows: Sequence[ReplayResult], probe: str) -> bool:
    return any(r.probe == probe and not r.detail.startswith(NOT_RUN) for r in rows)


def _why(rows: Sequence[ReplayResult], probe: str) -> str | None:
    for r in rows:
        if r.probe == probe and r.detail.startswith("not run: "):
            return r.detail.removeprefix("not run: ")
    return None


def describe(rows: Sequence[ReplayResult]) -> str:
    """E.g. "tier 2 ran (...); tier 3 needs: checkpoint-100 has no optimizer.pt ..."."""
    tier3_block = _why(rows, "reproduce") or "a checkpoint before the offending step"
    if _ran(rows, "reproduce"):
        return (
            "tier 3 ran (the run's own model, re-trained from its checkpoint to the offending step)"
        )
    if _ran(rows, "reference_judge"):
        return (
            "tier 2 ran (the bundled model trained on the run's own tokens judged the batch; a "
            f"proxy); tier 3 needs: {tier3_block}"
        )
    if _ran(rows, "data_corruption"):
        judge = _why(rows, "reference_judge")
        two = (
            f"tier 2 could not run ({judge})" if judge else "tier 2 was not asked for (--no-judge)"
        )
        return (
            f"tier 1 ran (data probes on the run's own batches); {two}; tier 3 needs: {tier3_block}"
        )
    why = _why(rows, "data_corruption") or next((r.detail for r in rows), "no incident")
    return f"no tier ran: {why}"
