"""What every trainer's stored fix share must say about its run without the trigger
(forensics/replay/probes/fix_share.py), whichever trainer re-ran it."""

from __future__ import annotations

from typing import Any


def check_ordinary_substitutes(n: dict[str, Any]) -> None:
    """The stored numbers `n` of a confirmed stale_beta2 row: the hard steps trained ordinary
    batches (none skipped) taken from outside the re-runs, the nearest fresh one first, and
    the compared steps follow the first hard one without including any."""
    assert "kept_plain" not in n
    assert n["fix_baseline"] == "ordinary batches" and not n["fix_skipped_steps"]
    subs = {int(t): u for t, u in n["fix_substitutes"].items()}
    assert sorted(subs) == n["fix_hard_steps"]  # none of the re-runs trains them otherwise:
    assert all(not n["fix_checkpoint_step"] < u <= n["fix_end_step"] for u in subs.values())
    assert list(subs.values())[0] == n["fix_end_step"] + 1  # the nearest fresh one first
    hard = n["fix_hard_steps"]
    assert n["fix_steps"] and min(n["fix_steps"]) > hard[0] and not set(n["fix_steps"]) & set(hard)
