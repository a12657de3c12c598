"""Detect stage: find every loss spike of a run, type it, name its likely cause, advise.

    detect(store, run)            -> list[Detection]   (reads the store, writes incidents)
    detect_data(RunData, rules)   -> Detection         (pure, for tests and benches)

docs/detection.md describes the algorithm, every threshold and every feature.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from forensics.detect.config import DetectConfig
from forensics.lazy import lazy_exports

if TYPE_CHECKING:
    from forensics.detect import recurrence
    from forensics.detect.data import RunData, run_data
    from forensics.detect.detector import detect_data
    from forensics.detect.model import Detection, Incident, NearMiss
    from forensics.detect.rules import Rule, load_rules
    from forensics.store import Store

# Loaded on first use, so that `forensics rules list` (which needs only detect.rules) does
# not pay for scipy and the detector.
_LAZY = {
    "RunData": "forensics.detect.data",
    "run_data": "forensics.detect.data",
    "detect_data": "forensics.detect.detector",
    "Detection": "forensics.detect.model",
    "Incident": "forensics.detect.model",
    "NearMiss": "forensics.detect.model",
    "Rule": "forensics.detect.rules",
    "load_rules": "forensics.detect.rules",
}

__getattr__ = lazy_exports(__name__, _LAZY)


def detect(
    store: Store,
    run: str | None = None,
    *,
    config: DetectConfig | None = None,
    rules_dirs: Iterable[Path] = (),
    rules: list[Rule] | None = None,
    gpu_hour_cost: float | None = None,
) -> list[Detection]:
    """Detect incidents in `run` (every run of the store when None) and store them.

    Cross-run evidence reads the spikes the other runs of the store have stored. Detecting
    every run (run=None) of a store with several runs therefore takes two passes: the first
    stores every run's incidents, the second re-explains each run knowing all the others,
    so the result does not depend on the order the runs were ingested in. The store's
    `recurrences` table is rebuilt at the end."""
    from forensics.detect import recurrence
    from forensics.detect.rules import load_rules

    rules = rules if rules is not None else load_rules(rules_dirs)
    run_ids = [store.resolve_run(run)] if run is not None else store.run_names()
    if not run_ids:
        store.resolve_run(None)  # raises: the database holds no run
    passes = 2 if run is None and len(run_ids) > 1 else 1
    for _ in range(passes):
        spikes = recurrence.run_spikes(store)
        out = [_detect_one(store, r, rules, config, gpu_hour_cost, spikes) for r in run_ids]
    recurrence.write(store, recurrence.find(recurrence.run_spikes(store)))
    return out


def _detect_one(
    store: Store,
    run_id: str,
    rules: list[Rule],
    config: DetectConfig | None,
    gpu_hour_cost: float | None,
    spikes: list[recurrence.RunSpikes],
) -> Detection:
    from forensics.detect import coverage, explain_store, recurrence, rollbacks
    from forensics.detect import store as detect_store
    from forensics.detect.detector import detect_data

    data = detect_store.load_run(store, run_id)
    data.has_batches = detect_store.has_batches(store, run_id)
    ckpts = detect_store.checkpoints(store, run_id)
    me = next((s for s in spikes if s.run_id == run_id), None)
    others = recurrence.distinct([s for s in spikes if s.run_id != run_id], besides=me)
    attempts = rollbacks.detect_attempts(
        data, rollbacks.load(store, run_id, data.loss_name), rules, config
    )
    det = detect_data(
        data, rules, config, ckpts, gpu_hour_cost, others, rollbacks.spikes(data, attempts)
    )
    det.rollbacks = rollbacks.rows(data, attempts, det.incidents)
    detect_store.write(store, det)
    explain_store.write(store, det)
    if det.coverage is not None:
        coverage.write(store, run_id, det.coverage)
    return det


__all__ = [
    "Detection",
    "DetectConfig",
    "Incident",
    "NearMiss",
    "RunData",
    "detect",
    "detect_data",
    "load_rules",
    "run_data",
]
