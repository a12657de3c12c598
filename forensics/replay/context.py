"""Everything a replay reads from the store, gathered once per run.

Replay works from the store, not from a run folder: checkpoint paths come from `checkpoints`,
batch spans (absolute shard paths) from `batches`, unigram counts from `token_counts`, and the
logged loss / grad norm that the replay must reproduce from `metrics`. So a run ingested from
anywhere replays the same way as a bundled sample run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from forensics.errors import ReplayError
from forensics.sim.data import BatchRecord
from forensics.store.db import Store

LOGGED = ("loss", "grad_norm", "update_norm", "lr", "loss_scale")


@dataclass
class Checkpoint:
    step: int
    path: str
    has_optimizer: bool
    reference_model: bool
    arch: str | None


@dataclass
class Incident:
    """The part of an `incidents` row replay needs (or an ad-hoc `--step` target)."""

    incident_id: int
    onset: int
    peak: int
    end: int | None
    pre_value: float | None
    cause: str | None
    step: int | None = None  # offending step forced by `--step` (else found from the log)
    recovery: str | None = None  # detect's advice (`incidents.recovery`)
    # its off-trend stretches after the first, in order: (first step off, its highest peak)
    later: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class RunData:
    run_id: str
    config: dict[str, Any]
    records: dict[int, list[BatchRecord]]
    checkpoints: list[Checkpoint]
    logged: dict[str, dict[int, float]]
    token_counts: np.ndarray | None
    incidents: list[Incident] = field(default_factory=list)
    missing_spans: dict[int, str] = field(default_factory=dict)  # step -> why it cannot be read

    def value(self, metric: str, step: int) -> float | None:
        """A logged value (NaN/Inf kept), None when the run did not log it at that step."""
        return self.logged.get(metric, {}).get(step)

    def steps_logged(self, metric: str = "loss") -> list[int]:
        return sorted(self.logged.get(metric, {}))


def load_run(store: Store, run_id: str) -> RunData:
    """Read the run's config, manifest, checkpoints, logged metrics, counts and incidents."""
    records, missing = _records(store, run_id)
    return RunData(
        run_id=run_id,
        config=_config(store, run_id),
        records=records,
        checkpoints=_checkpoints(store, run_id),
        logged=_logged(store, run_id),
        token_counts=_token_counts(store, run_id),
        incidents=_incidents(store, run_id),
        missing_spans=missing,
    )


def _config(store: Store, run_id: str) -> dict[str, Any]:
    # Not Store.run_config: its fetchone() leaves the DuckDB 2.0 result open, and the
    # connection then refuses the next query.
    frame = store.query("SELECT config FROM runs WHERE run_id = ?", [run_id])
    raw = frame["config"][0] if frame.height else None
    return json.loads(raw) if raw else {}


def _records(store: Store, run_id: str) -> tuple[dict[int, list[BatchRecord]], dict[int, str]]:
    """BatchRecords by step from the `batches` table (sources are absolute shard paths)."""
    frame = store.query(
        "SELECT step, source, micro, sample_index, token_offset, n_tokens, seq_len, extra "
        "FROM batches WHERE run_id = ? ORDER BY step, micro",
        [run_id],
    )
    out: dict[int, list[BatchRecord]] = {}
    missing: dict[int, str] = {}
    for row in frame.iter_rows(named=True):
        step = int(row["step"])
        if row["token_offset"] is None or row["n_tokens"] is None or not row["seq_len"]:
            missing[step] = f"the manifest gives no token span for step {step}"
            continue
        extra = json.loads(row["extra"]) if row["extra"] else {}
        n, seq = int(row["n_tokens"]), int(row["seq_len"])
        rec = BatchRecord(
            step=step,
            micro=int(row["micro"] or 0),
            source=str(row["source"]),
            token_offset=int(row["token_offset"]),
            n_tokens=n,
            seq_len=seq,
            batch_size=int(extra.get("batch_size", (n - 1) // seq)),
            input_scale=float(extra.get("input_scale", 1.0)),
        )
        out.setdefault(step, []).append(rec)
    return out, missing


def _checkpoints(store: Store, run_id: str) -> list[Checkpoint]:
    frame = store.query(
        "SELECT step, path, has_optimizer, reference_model, model_config FROM checkpoints "
        "WHERE run_id = ? AND step IS NOT NULL ORDER BY step",
        [run_id],
    )
    out = []
    for row in frame.iter_rows(named=True):
        cfg = json.loads(row["model_config"]) if row["model_config"] else {}
        arch = cfg.get("arch") if isinstance(cfg, dict) else None
        out.append(
            Checkpoint(
                step=int(row["step"]),
                path=str(row["path"]),
                has_optimizer=bool(row["has_optimizer"]),
                reference_model=bool(row["reference_model"]),
                arch=None if arch is None else str(arch),
            )
        )
    return out


def _logged(store: Store, run_id: str) -> dict[str, dict[int, float]]:
    frame = store.metrics_long(run_id, list(LOGGED))
    out: dict[str, dict[int, float]] = {}
    for step, metric, value, _ in frame.iter_rows():
        if value is not None:
            out.setdefault(metric, {})[int(step)] = float(value)
    return out


def _token_counts(store: Store, run_id: str) -> np.ndarray | None:
    frame = store.query(
        "SELECT token, sum(count) AS n FROM token_counts WHERE run_id = ? GROUP BY token",
        [run_id],
    )
    if frame.height == 0:
        return None
    tokens = frame["token"].to_numpy().astype(np.int64)
    counts = np.zeros(int(tokens.max()) + 1, dtype=np.float64)
    counts[tokens] = frame["n"].to_numpy().astype(np.float64)
    return counts


def _incidents(store: Store, run_id: str) -> list[Incident]:
    frame = store.query(
        "SELECT incident_id, onset_step, peak_step, end_step, pre_value, cause, recovery, peaks "
        "FROM incidents "
        "WHERE run_id = ? ORDER BY incident_id",
        [run_id],
    )
    return [
        Incident(
            incident_id=int(r["incident_id"]),
            onset=int(r["onset_step"]),
            peak=int(r["peak_step"] if r["peak_step"] is not None else r["onset_step"]),
            end=None if r["end_step"] is None else int(r["end_step"]),
            pre_value=r["pre_value"],
            cause=r["cause"],
            recovery=r["recovery"],
            later=later_stretches(r["peaks"]),
        )
        for r in frame.iter_rows(named=True)
    ]


def later_stretches(peaks: str | None) -> list[tuple[int, int]]:
    """(first step off the trend, highest peak) of each off-trend stretch after the first,
    from the stored `peaks` (detect.store._peaks: each peak with the stretch that holds it)."""
    stretches: dict[int, tuple[int, float]] = {}
    for p in json.loads(peaks or "[]"):
        a, step = int(p["from"]), int(p["step"])
        value = math.nan if p["value"] is None else float(p["value"])
        if a not in stretches or _higher(value, stretches[a][1]):
            stretches[a] = (step, value)
    return [(a, stretches[a][0]) for a in sorted(stretches)[1:]]


def _higher(a: float, b: float) -> bool:
    """a is the higher peak; a non-finite (NaN) peak is the highest."""
    return not math.isfinite(a) or (math.isfinite(b) and a > b)


def select_incidents(data: RunData, incident_id: int | None, step: int | None) -> list[Incident]:
    """The incidents to replay: one by id, the one holding `step`, an ad-hoc one, or all.

    `step` forces the offending step (with `incident_id`, inside that incident)."""
    if incident_id is not None:
        hit = [i for i in data.incidents if i.incident_id == incident_id]
        if not hit:
            known = ", ".join(str(i.incident_id) for i in data.incidents) or "none"
            raise ReplayError(
                f'run "{data.run_id}" has no incident {incident_id} (incidents: {known}); '
                "run `forensics analyze` first or pass --step"
            )
        if step is None:
            return hit
        inc = hit[0]  # --incident with --step: that incident, offending step forced
        onset, peak = min(inc.onset, step), max(inc.peak, step)
        return [Incident(inc.incident_id, onset, peak, inc.end, inc.pre_value, inc.cause, step)]
    if step is None:
        return list(data.incidents)
    for inc in data.incidents:
        if inc.onset <= step <= max(inc.peak, inc.end or inc.peak):
            onset, peak = min(inc.onset, step), max(inc.peak, step)
            return [Incident(inc.incident_id, onset, peak, inc.end, inc.pre_value, inc.cause, step)]
    return [Incident(ADHOC_ID, step, step, None, None, None, step)]


ADHOC_ID = -1  # incident_id of a `--step N` replay that matches no detected incident


def replayable(store: Store, run_id: str) -> str | None:
    """What the run lacks for a full replay (None: checkpoints and a manifest are there)."""
    n_ckpt, n_batch = store.query(
        "SELECT (SELECT count(*) FROM checkpoints WHERE run_id = $1) AS n_ckpt, "
        "(SELECT count(*) FROM batches WHERE run_id = $1) AS n_batch",
        [run_id],
    ).row(0)
    if not n_batch:
        return (
            f'run "{run_id}" has no batch manifest: replay needs its batches (a '
            "*manifest*.jsonl or forensics/batches.jsonl beside the logs; --shards with "
            "--loader, --batch-size, --seq-len; or --dataset)"
        )
    if not n_ckpt:
        return f'run "{run_id}" has no checkpoint ingested: only data statistics can run'
    return None


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
