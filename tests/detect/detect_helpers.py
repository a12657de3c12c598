"""Series builders shared by the detection tests: a clean pre-training curve plus shapes;
and the incidents detection stores for a run folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from forensics.analyze import AnalyzeOptions, analyze
from forensics.store import open_store


def curve(n: int = 4000, *, noise: float = 0.01, seed: int = 0, start: int = 1) -> np.ndarray:
    """A noisy power-law loss from ~10.8 down to ~2.5 over n steps."""
    rng = np.random.default_rng(seed)
    t = np.arange(start, start + n, dtype=float)
    return (2.2 + 8.6 * (1 + t / 80) ** -0.6) * np.exp(rng.normal(0, noise, n))


def spike(loss: np.ndarray, at: int, amp: float, tau: float, offset: float = 0.0) -> np.ndarray:
    """Multiply the loss by exp(profile): a jump of `amp` (log) at index `at` decaying with tau
    towards `offset`."""
    out = loss.copy()
    k = np.arange(len(loss) - at, dtype=float)
    out[at:] *= np.exp(offset + (amp - offset) * np.exp(-k / tau))
    return out


def stored_incidents(folder: Path, tmp_path: Path, extra: tuple[str, ...] = ()) -> list[dict]:
    """Analyze `folder` (no replay, no report) and return its stored incidents' onset, peak,
    type and cause, and the `extra` columns."""
    db = tmp_path / "detect.duckdb"
    res = analyze([folder], out=None, db=db, options=AnalyzeOptions(replay=False, report=False))
    cols = ", ".join(("onset_step", "peak_step", "type", "cause", *extra))
    with open_store(db, read_only=True) as store:
        return store.query(
            f"SELECT {cols} FROM incidents WHERE run_id = ?", [res.run_id]
        ).to_dicts()


def stored_features(tmp_path: Path) -> list[dict]:
    """The stored features of each incident that stored_incidents analysed, in id order."""
    with open_store(tmp_path / "detect.duckdb", read_only=True) as store:
        rows = store.query("SELECT features FROM incidents ORDER BY incident_id").rows()
    return [json.loads(f) for (f,) in rows]
