"""Spikes that recur across the runs of one store: evidence about the data.

Runs that read the same data in the same order see the same batch at the same step (or at
the same number of tokens consumed, when their batch sizes differ). A spike that several
such runs show at that point, whatever their optimizer or architecture, is the batch's;
runs that share the data order but spike at different steps point away from the data.

Unless the runs were one state there: two runs whose losses before the spike agree to a
fraction of their step-to-step noise (the same initialisation, data order and code, up to
GPU nondeterminism: one run repeated) meet the same batch with the same weights, and a
spike that is the optimizer's would come in both as surely as one that is the batch's. Such
a run counts once (`tracks`).

Two uses: `cross_features` gives an incident its `cross_runs` / `cross_runs_covering`
features (read by the rules, so a cross-run recurrence changes the stated cause), and
`find` / `write` keep the `recurrences` table that `forensics compare` prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from forensics.detect.model import FeatureValue, Incident
from forensics.store import Store

# Peaks of two runs at most this many steps apart (or one log interval of the sparser run)
# are "the same step": modded-nanogpt's 946/947 is one batch whose step the records count
# from 0 or from 1.
STEP_TOLERANCE = 2

# A run "tracks" another at a spike when their losses agree to TRACK_SHARE of the smaller
# median step-to-step change twice: over the TRACK_POINTS logged steps before the peak
# (TRACK_MIN_SHARED of them logged by both at least), and over their whole shared history
# before it (the median of the per-bin medians, bins of `bin_width` steps: two runs of one
# data order whose loss curves cross agree near the crossing only). On the modded-nanogpt
# records: a run repeated differs by 0.01-0.18 of that change before its spikes (Muon and
# SOAP, the two ValueEmbed runs, the ScaleUp1B runs ad8d7ae5 and c0078066 until their
# schedules part); runs of one data order with other weights by 0.5-5 (ScaleShortcuts and
# SOAP: 0.05 at step 5000, where their curves cross, 0.5-2 elsewhere).
TRACK_POINTS = 20
TRACK_MIN_SHARED = 8
TRACK_SHARE = 0.25
TRACK_MIN_BINS = 5
PROFILE_BIN = 50  # the profile's bin: this many steps, or PROFILE_INTERVALS log intervals
PROFILE_INTERVALS = 10

Window = tuple[np.ndarray, np.ndarray]  # (steps, values): a run's loss before one peak
Profile = Mapping[int, tuple[float, float]]  # bin -> (median loss, median |change|)

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
    # its loss before each peak (peak step -> window), for `tracks`; empty: not read
    windows: Mapping[int, Window] = field(default_factory=dict, compare=False, hash=False)
    # its loss history for `tracks`: bin (step // bin_width) -> (median loss, median |change|)
    profile: Profile = field(default_factory=dict, compare=False, hash=False)
    bin_width: int = 1


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
    return _matching_peak(step, interval, tps, other) is not None


def _matching_peak(step: int, interval: float, tps: float | None, other: RunSpikes) -> int | None:
    """The other run's peak at the same step (or at the same tokens consumed), if any."""
    peaks = np.asarray(other.peaks, dtype=float)
    if len(peaks) == 0:
        return None
    gap = np.abs(peaks - step)
    if gap.min() <= _tol(interval, other.interval):
        return int(other.peaks[int(gap.argmin())])
    if tps and other.tokens_per_step and tps != other.tokens_per_step:
        tol = _tol(interval, other.interval) * max(tps, other.tokens_per_step)
        gap = np.abs(peaks * other.tokens_per_step - step * tps)
        if gap.min() <= tol:
            return int(other.peaks[int(gap.argmin())])
    return None


def window(steps: np.ndarray, values: np.ndarray, peak: int, interval: float) -> Window:
    """The finite loss of the TRACK_POINTS logged intervals before `peak`."""
    keep = (steps >= peak - TRACK_POINTS * interval) & (steps < peak) & np.isfinite(values)
    return steps[keep], values[keep]


def _noise(values: np.ndarray) -> float:
    return float(np.median(np.abs(np.diff(values)))) if len(values) > 1 else 0.0


def tracks(a: Window, b: Window) -> bool:
    """The two runs' losses before the peak, at the steps both logged, differ by at most
    TRACK_SHARE of the smaller step-to-step change (module doc)."""
    _, ia, ib = np.intersect1d(a[0], b[0], assume_unique=True, return_indices=True)
    if len(ia) < TRACK_MIN_SHARED:
        return False
    diff = float(np.median(np.abs(a[1][ia] - b[1][ib])))
    return diff <= TRACK_SHARE * min(_noise(a[1]), _noise(b[1]))


def profile(steps: np.ndarray, values: np.ndarray, width: int) -> dict[int, tuple[float, float]]:
    """Per bin of `width` steps: the median finite loss and the median change between
    consecutive finite points (the change into a bin's first point counts in that bin)."""
    keep = np.isfinite(values)
    steps, values = steps[keep], values[keep]
    if len(steps) < 2:
        return {}
    bins = steps[1:] // width
    change = np.abs(np.diff(values))
    cuts = np.flatnonzero(np.diff(bins)) + 1
    out = {}
    for b, v, c in zip(
        bins[np.r_[0, cuts]], np.split(values[1:], cuts), np.split(change, cuts), strict=True
    ):
        out[int(b)] = (float(np.median(v)), float(np.median(c)))
    return out


def same_history(a: Profile, b: Profile, before: int) -> bool:
    """The two runs' loss agreed bin by bin over their shared history before bin `before`:
    the median level difference is at most TRACK_SHARE of the median change."""
    shared = [k for k in a if k < before and k in b]
    if len(shared) < TRACK_MIN_BINS:
        return False
    diff = float(np.median([abs(a[k][0] - b[k][0]) for k in shared]))
    noise = float(np.median([min(a[k][1], b[k][1]) for k in shared]))
    return diff <= TRACK_SHARE * noise


@dataclass
class RunLoss:
    """This run's logged loss for `cross_features`, its history profile made once per bin
    width (a million-step log takes seconds to bin: once per run, not per incident)."""

    steps: np.ndarray
    values: np.ndarray
    _profiles: dict[int, Profile] = field(default_factory=dict)

    def profile(self, width: int) -> Profile:
        if width not in self._profiles:
            self._profiles[width] = profile(self.steps, self.values, width)
        return self._profiles[width]


def one_state(
    wa: Window | None, pa: Profile, wb: Window | None, pb: Profile, before_bin: int
) -> bool:
    """Two runs were one state before a shared peak: `tracks` near it and `same_history`
    over the bins before `before_bin` (a window not read: not known to be one state)."""
    if wa is None or wb is None or not tracks(wa, wb):
        return False
    return same_history(pa, pb, before_bin)


def _tracks_at(a: RunSpikes, a_peak: int, b: RunSpikes, b_peak: int) -> bool:
    """`b` was `a`'s state before their peaks (`one_state`)."""
    before = min(a_peak, b_peak) // max(1, a.bin_width)
    return one_state(a.windows.get(a_peak), a.profile, b.windows.get(b_peak), b.profile, before)


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
    inc: Incident,
    interval: float,
    tps: float | None,
    others: list[RunSpikes],
    loss: RunLoss | None = None,
) -> dict[str, FeatureValue]:
    """cross_runs / cross_runs_covering of one incident (None with no other run). `loss`:
    this run's logged loss (steps, values); another run that tracks it before the peak
    (`tracks`) is this run repeated, no other run."""
    if not others:
        return {"cross_runs": None, "cross_runs_covering": None}
    steps = [s for s, v in inc.peaks if v is not None and np.isfinite(v)] or [inc.peak_step]
    covering = [o for o in others if any(covers(o, s) for s in steps)]
    hits: list[tuple[RunSpikes, int]] = []  # one per state: a run tracking a hit is no other
    for o in covering:
        at = [(s, p) for s in steps if (p := _matching_peak(s, interval, tps, o)) is not None]
        if not at or (loss is not None and _tracks_me(loss, interval, at, o)):
            continue
        if not any(_tracks_at(h, hp, o, at[0][1]) for h, hp in hits):
            hits.append((o, at[0][1]))
    return {"cross_runs": float(len(hits)), "cross_runs_covering": float(len(covering))}


def _tracks_me(loss: RunLoss, interval: float, at: list[tuple[int, int]], o: RunSpikes) -> bool:
    """Every matched peak of `o` is one this run was in the same state before."""
    mine = loss.profile(o.bin_width)
    return all(
        one_state(
            window(loss.steps, loss.values, s, interval),
            mine,
            o.windows.get(p),
            o.profile,
            min(s, p) // o.bin_width,
        )
        for s, p in at
    )


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
    intervals = {r[0]: max(1.0, (r[2] - r[1]) / max(1, r[3] - 1)) for r in spans}
    width = max(
        [PROFILE_BIN] + [int(PROFILE_INTERVALS * intervals[r]) for r in peaks if r in intervals]
    )
    several = len(spans) > 1  # one run alone has no other to track: nothing more to read
    profiles = _profiles(store, sorted(peaks), width) if several else {}
    out = []
    for run_id, first, last, _n, series in spans:
        cfg = store.run_config(run_id)
        interval = intervals[run_id]
        mine = tuple(sorted(peaks.get(run_id, [])))
        out.append(
            RunSpikes(
                run_id,
                mine,
                int(first),
                int(last),
                interval,
                tokens_per_step(cfg),
                data_order(cfg),
                series,
                _windows(store, run_id, mine, interval) if several else {},
                profiles.get(run_id, {}),
                width,
            )
        )
    return out


def _profiles(store: Store, run_ids: list[str], width: int) -> dict[str, dict]:
    """`profile` of each run's loss, in one scan (the same numbers as profile())."""
    if not run_ids:
        return {}
    rows = store.con.execute(
        "WITH l AS (SELECT run_id, step, value, value - lag(value) OVER (PARTITION BY run_id "
        "ORDER BY step) AS d FROM metrics WHERE metric = 'loss' AND isfinite(value) "
        "AND list_contains($runs, run_id)) "
        "SELECT run_id, step // $w AS bin, median(value), median(abs(d)) FROM l "
        "WHERE d IS NOT NULL GROUP BY ALL ORDER BY run_id, bin",
        {"runs": run_ids, "w": width},
    ).fetchall()
    out: dict[str, dict] = {}
    for run_id, b, level, change in rows:
        out.setdefault(run_id, {})[int(b)] = (float(level), float(change))
    return out


def _windows(store: Store, run_id: str, peaks: tuple[int, ...], interval: float) -> dict:
    """The run's loss before each of its peaks (`window`), read in one query."""
    if not peaks:
        return {}
    span = TRACK_POINTS * interval
    ranges = " OR ".join(f"(step >= {p - span} AND step < {p})" for p in peaks)
    rows = store.con.execute(
        f"SELECT step, value FROM metrics WHERE run_id = ? AND metric = 'loss' AND ({ranges}) "
        "ORDER BY step",
        [run_id],
    ).fetchall()
    steps = np.array([r[0] for r in rows], dtype=np.int64)
    values = np.array([r[1] for r in rows], dtype=float)
    return {p: window(steps, values, p, interval) for p in peaks}


@dataclass
class Recurrence:
    """One step (or token count) at which several runs spike."""

    id: int
    step: int
    runs: list[tuple[str, int]]  # (run_id, peak step)
    covering: list[str]  # runs whose log covers the step, spiking or not
    shared_order: bool | None  # all spiking runs share a data order per their configs
    by_chance: float  # expected number of such coincidences from each run's spike rate
    # runs that spike there too but track a run of `runs` before it (run, peak, the run it
    # tracks): that run repeated, not counted
    repeats: list[tuple[str, int, str]] = field(default_factory=list)

    @property
    def absent(self) -> list[str]:
        spiking = {r for r, _ in self.runs}
        return [r for r in self.covering if r not in spiking]


def find(runs: list[RunSpikes]) -> list[Recurrence]:
    """Steps where two runs or more spike together, most runs first (a run logged twice
    counts once; so does a run that tracks another before the spike: `repeats`)."""
    runs = distinct(runs)
    by_id = {r.run_id: r for r in runs}
    points = sorted((s, r.run_id) for r in runs for s in r.peaks)
    used: set[tuple[int, str]] = set()
    out: list[Recurrence] = []
    for step, run_id in points:
        if (step, run_id) in used:
            continue
        group, repeats = _group(step, by_id[run_id], by_id, used)
        if len(group) < 2:
            continue
        used |= {(s, r) for r, s in group} | {(s, r) for r, s, _ in repeats}
        again = {r for r, _, _ in repeats}
        covering = [r.run_id for r in runs if covers(r, step) and r.run_id not in again]
        members = [by_id[r] for r, _ in group]
        orders = [same_order(members[0], m) for m in members[1:]]
        shared = None if any(o is None for o in orders) else all(orders)
        chance = _by_chance(members, step)
        out.append(Recurrence(0, step, group, covering, shared, chance, repeats))
    out.sort(key=lambda r: (-len(r.runs), r.step))
    for i, r in enumerate(out, 1):
        r.id = i
    return out


def _group(
    step: int, me: RunSpikes, by_id: dict[str, RunSpikes], used: set[tuple[int, str]]
) -> tuple[list[tuple[str, int]], list[tuple[str, int, str]]]:
    """The runs spiking with `me` at `step`: counted (run, peak), and repeats (run, peak,
    the counted run it tracks before the peak)."""
    group = [(me.run_id, step)]
    repeats: list[tuple[str, int, str]] = []
    for other in by_id.values():
        if other.run_id == me.run_id:
            continue
        near = [
            s
            for s in other.peaks
            if (s, other.run_id) not in used
            and _matches(step, me.interval, me.tokens_per_step, _only(other, s))
        ]
        if not near:
            continue
        twin = next((r for r, p in group if _tracks_at(by_id[r], p, other, near[0])), None)
        if twin is None:
            group.append((other.run_id, near[0]))
        else:
            repeats.append((other.run_id, near[0], twin))
    return group, repeats


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
            twin,
        )
        for r in recurrences
        for run_id, peak, twin in [(a, p, None) for a, p in r.runs] + r.repeats
    ]
    with store.transaction():
        store.con.execute("DELETE FROM recurrences")
        if rows:
            store.con.executemany(
                "INSERT INTO recurrences (recurrence_id, step, run_id, peak_step, n_runs, "
                "n_covering, shared_data_order, by_chance, absent_runs, repeat_of) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
