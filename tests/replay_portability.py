"""What a replay of a bundled sample run may honestly conclude on another CPU.

The sample runs were trained on one machine. Replay on another reproduces every step to
within the reproduce probe's tolerance, except in a chaotic run: `lr_too_high` trains at
100x a sane LR, which amplifies last-bit differences between CPUs' float kernels until the
replay departs from the log before the offending step (measured on this CI machine: step 126,
loss 5.09605 logged vs 5.09648 replayed, six steps after the checkpoint). Replay must then
say so, and only the LR counterfactual may conclude (the rare-token probe may also refute a
batch on its tokens alone, which no replayed state enters), and only statistically: the replay
reproduced the log through the window's start and drifted off by rounding after it, so the
run's own LR and the halved one are compared from the same logged state on the same batches
(optimizer.decide_lr_drifted). What replay confirms on a run it does reproduce is pinned by
tests/replay/test_scenario_truth.py, which trains lr_too_high on the machine that replays it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# Scenarios whose sample run cannot be replayed faithfully on a CPU other than its own.
CHAOTIC = frozenset({"lr_too_high"})
DEPARTS = "replay departs from the log before the offending step"


def departed(scenario: str, probes: Iterable[tuple[str, str, str]]) -> bool:
    """(probe, verdict, detail) rows: did the reproduce probe find the replay left the log
    before the offending step, in a scenario where that is expected across CPUs?"""
    if scenario not in CHAOTIC:
        return False
    return any(p == "reproduce" and v == "refuted" and DEPARTS in d for p, v, d in probes)


def rows_of(results: Iterable[Any]) -> list[tuple[str, str, str]]:
    return [(r.probe, r.verdict, r.detail) for r in results]


def drifted(probe: str, verdict: str, detail: str, numbers: dict[str, Any]) -> bool:
    """Is this row the LR counterfactual's statistical verdict on a replay that drifted off
    the log by rounding after the window's start (the one conclusion such a replay allows)?"""
    return (
        probe == "lr_too_high"
        and numbers.get("drift_step") is not None
        and detail.startswith("statistical: ")
    )
