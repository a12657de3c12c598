"""Spikes that recur across the runs of one store: evidence about the data.

Runs that read the same data in the same order see the same batch at the same step (or at
the same number of tokens consumed, when their batch sizes differ). A spike that several
such runs show at that point, whatever their optimizer or architecture, is the batch's;
runs that share the data order but spike at different steps point away from the data.

Two uses: `cross_features` gives an incident its `cross_runs` / `cross_runs_covering`
features (read by the rules, so a cross-run recurrence changes the stated cause), and
`find` / `write` keep the `recurrences` table that `forensics compare` prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from forensics.detect.model import FeatureValue, Incident
from forensics.store import Store

# Peaks of two runs at most this many steps apart (or one log interval of the sparser run)
# are "the same step": modded-nanogpt's 946/947 is one batch whose step the records count
# from 0 or from 1.
STEP_TOLERANCE = 2

# Config keys that say which data a run reads, in what order and how much per step.
DATASET_KEYS = ("data_path", "dataset", "dataset_name", "train_data", "input_bin", "data")
SEED_KEYS = ("seed", "data_seed")
BATCH_KEYS = ("global_batch_size", "batch_size", "total_batch_size", "train_batch_size")
SEQ_KEYS = ("seq_length", "seq_len", "sequence_length", "max_seq_len", "block_size")


@dataclass(frozen=True)
class RunSpikes:
    """What cross-run evidence needs about one run: its loss peaks and its data order."""

    run_id: str
    peaks: tuple[int, ...]  # peak steps of its loss incidents (every merged peak)
    first: int
    last: int
    interval: float
    tokens_per_step: float | None
    data_order: tuple[str, str, str] | None  # (dataset, seed, batch size); None: unknown
    # the loss series' fingerprint (steps and float32 values): two runs that share it are
    # one run logged twice (Lightning's CSVLogger and TensorBoardLogger write one fit to
    # version_0/ and version_1/), not two runs that spike at the same steps
    series: int | None = None


def _first(config: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if config.get(k) not in (None, ""):
            return config[k]
    return None


def _number(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) and f > 0 else None


def tokens_per_step(config: Mapping[str, Any]) -> float | None:
    """Tokens one optimizer step consumes (global batch x sequence length), when known."""
    batch, seq = _number(_first(config, BATCH_KEYS)), _number(_first(config, SEQ_KEYS))
    return batch * seq if batch and seq else None


def data_order(config: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(dataset, seed, batch size) from the config; None when none of them is known."""
    parts = tuple(
        "?" if v is None else str(v)
        for v in (_first(config, k) for k in (DATASET_KEYS, SEED_KEYS, BATCH_KEYS))
    )
    return None if parts == ("?", "?", "?") else parts  # type: ignore[return-value]


def same_order(a: RunSpikes, b: RunSpikes) -> bool | None:
    """True/False when both configs say (every known part equal, at least two known)."""
    if a.data_order is None or b.data_order is None:
        return None
    known = [(x, y) for x, y in zip(a.data_order, b.data_order, strict=True) if "?" not in (x, y)]
    if len(known) < 2:
        return None
    return all(x == y for x, y in known)


def _tol(a: float, b: float) -> float:
    return max(float(STEP_TOLERANCE), a, b)


def _matches(step: int, interval: float, tps: float | None, other: RunSpikes) -> bool:
    """The other run spikes at the same step, or at the same tokens consumed."""
    peaks = np.asarray(other.peaks, dtype=float)
    if len(peaks) == 0:
        return False
    if np.any(np.abs(peaks - step) <= _tol(interval, other.interval)):
        return True
    if tps and other.tokens_per_step and tps != other.tokens_per_step:
        tol = _tol(interval, other.interval) * max(tps, other.tokens_per_step)
        return bool(np.any(np.abs(peaks * other.tokens_per_step - step * tps) <= tol))
    return False


def copies(runs: list[RunSpikes]) -> dict[str, str]:
    """Each run that logs the same loss series as an earlier one (in `runs`' order, by name
    from the store) -> that earlier run."""
    first: dict[int, str] = {}
    out: dict[str, str] = {}
    for r in runs:
        if r.series is None:
            continue
        if r.series in first:
            out[r.run_id] = first[r.series]
        else:
            first[r.series] = r.run_id
    return out


def distinct(runs: list[RunSpikes], besides: RunSpikes | None = None) -> list[RunSpikes]:
    """`runs` with one run kept of each logged loss series (the first), and none that logs
    the same series as `besides`: copies of one run are no evidence about the data."""
    twins = copies(runs)
    mine = besides.series if besides is not None else None
    return [r for r in runs if r.run_id not in twins and (mine is None or r.series != mine)]


def covers(run: RunSpikes, step: int) -> bool:
    return run.first <= step <= run.last


def cross_features(
    inc: Incident, interval: float, tps: float | None, others: list[RunSpikes]
) -> dict[str, FeatureValue]:
    """cross_runs / cross_runs_covering of one incident (None with no other run)."""
    if not others:
        return {"cross_runs": None, "cross_runs_covering": None}
    steps = [s for s, v in inc.peaks if v is not None and np.isfinite(v)] or [inc.peak_step]
    covering = [o for o in others if any(covers(o, s) for s in steps)]
    hits = [o for o in covering if any(_matches(s, interval, tps, o) for s in steps)]
    return {"cross_runs": float(len(hits)), "cross_runs_covering": float(len(covering))}


def in_attempts(inc: Incident, interval: float, attempts: list[RunSpikes]) -> float | None:
    """rollback_recurrence: how many attempts the run went back from (rollbacks.py) spiked at
    the incident's step too; None when no attempt logged that step. The same model state
    and data met again after a restart from a checkpoint: a spike that comes again is not a
    transient fault (Megatron's rerun state machine reasons the same way, online)."""
    steps = [s for s, v in inc.peaks if v is not None and np.isfinite(v)] or [inc.peak_step]
    covering = [a for a in attempts if any(covers(a, s) for s in steps)]
    if not covering:
        return None
    return float(sum(1 for a in covering if any(_matches(s, interval, None, a) for s in steps)))


# ----- the store side -------------------------------------------------------------------------
def run_spikes(store: Store) -> list[RunSpikes]:
    """Every run of the store with its stored loss-incident peaks (empty when not detected)."""
    # the fingerprint in the same scan: (metric, step, float32). Ordered by run: a hash
    # aggregate returns its groups in any order, and which of a run's copies counts as
    # "the earlier one" (copies, distinct) must not change from one run of the tool to the next
    spans = store.con.execute(
        "SELECT run_id, min(step), max(step), count(*), "
        "hash(list((metric, step, value::FLOAT) ORDER BY metric, step)) FROM metrics "
        "WHERE metric IN ('loss', 'val_loss') AND value IS NOT NULL GROUP BY run_id "
        "ORDER BY run_id"
    ).fetchall()
    rows = store.con.execute(
        "SELECT run_id, metric, peaks FROM incidents WHERE metric IN ('loss', 'val_loss')"
    ).fetchall()
    peaks: dict[str, list[int]] = {}
    for run_id, _metric, raw in rows:
        for p in json.loads(raw or "[]"):
            v = p.get("value")
            if v is not None and np.isfinite(float(v)):
                peaks.setdefault(run_id, []).append(int(p["step"]))
    out = []
    for run_id, first, last, n, series in spans:
        cfg = store.run_config(run_id)
        interval = max(1.0, (last - first) / max(1, n - 1))
        out.append(
            RunSpikes(
                run_id,
                tuple(sorted(peaks.get(run_id, []))),
                int(first),
                int(last),
                interval,
                tokens_per_step(cfg),
                data_order(cfg),
                series,
            )
        )
    return out


@dataclass
class Recurrence:
    """One step (or token count) at which several runs spike."""

    id: int
    step: int
    runs: list[tuple[str, int]]  # (run_id, peak step)
    covering: list[str]  # runs whose log covers the step, spiking or not
    shared_order: bool | None  # all spiking runs share a data order per their configs
    by_chance: float  # expected number of such coincidences from each run's spike rate

    @property
    def absent(self) -> list[str]:
        spiking = {r for r, _ in self.runs}
        return [r for r in self.covering if r not in spiking]


def find(runs: list[RunSpikes]) -> list[Recurrence]:
    """Steps where two runs or more spike together, most runs first (a run logged twice
    counts once)."""
    runs = distinct(runs)
    by_id = {r.run_id: r for r in runs}
    points = sorted((s, r.run_id) for r in runs for s in r.peaks)
    used: set[tuple[int, str]] = set()
    out: list[Recurrence] = []
    for step, run_id in points:
        if (step, run_id) in used:
            continue
        me = by_id[run_id]
        group = [(run_id, step)]
        for other in runs:
            if other.run_id == run_id:
                continue
            near = [
                s
                for s in other.peaks
                if (s, other.run_id) not in used
                and _matches(step, me.interval, me.tokens_per_step, _only(other, s))
            ]
            if near:
                group.append((other.run_id, near[0]))
        if len(group) < 2:
            continue
        used |= {(s, r) for r, s in group}
        covering = [r.run_id for r in runs if covers(r, step)]
        members = [by_id[r] for r, _ in group]
        orders = [same_order(members[0], m) for m in members[1:]]
        shared = None if any(o is None for o in orders) else all(orders)
        out.append(Recurrence(0, step, group, covering, shared, _by_chance(members, step)))
    out.sort(key=lambda r: (-len(r.runs), r.step))
    for i, r in enumerate(out, 1):
        r.id = i
    return out


def _only(run: RunSpikes, step: int) -> RunSpikes:
    return RunSpikes(
        run.run_id, (step,), run.first, run.last, run.interval, run.tokens_per_step, None
    )


def _by_chance(members: list[RunSpikes], step: int) -> float:
    """Expected coincidences: the first run's spike, matched by chance in each other run at
    its own rate of spikes per step over the tolerance window (a product over runs)."""
    p = 1.0
    for m in members[1:]:
        span = max(1.0, m.last - m.first)
        window = 2 * _tol(members[0].interval, m.interval) + 1
        p *= min(1.0, len(m.peaks) * window / span)
    return float(p)


def write(store: Store, recurrences: list[Recurrence]) -> None:
    """Replace the store's `recurrences` rows (they describe the whole store)."""
    rows = [
        (
            r.id,
            r.step,
            run_id,
            peak,
            len(r.runs),
            len(r.covering),
            r.shared_order,
            r.by_chance,
            json.dumps(r.absent),
        )
        for r in recurrences
        for run_id, peak in r.runs
    ]
    with store.transaction():
        store.con.execute("DELETE FROM recurrences")
        if rows:
            store.con.executemany(
                "INSERT INTO recurrences VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
            )
