"""Replay one run: for each incident rebuild the state, replay the window, run every probe.

Order per incident: data corruption first (it needs only the batch), then the state is
rebuilt from the latest usable checkpoint before the offending step and the logged steps are
re-run up to the end of the window, keeping snapshots for the probes. When the state cannot be
rebuilt (no checkpoint, no optimizer state, not the reference model, a missing batch or
shard) every state probe is stored as `inconclusive` with the reason, and the rest still run.
If the replay does not reproduce the log and the hardware probe does not explain why, the
state probes' verdicts are downgraded to inconclusive: they were measured on a state the run
never had.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from forensics.errors import ReplayError, SimulationError
from forensics.replay.context import (
    Checkpoint,
    Incident,
    RunData,
    load_run,
    replayable,
    select_incidents,
)
from forensics.replay.hf_replay import is_hf_run
from forensics.replay.manifest_source import recorded_batches
from forensics.replay.plan import Plan, make_plan, noted, reachable, restore_before
from forensics.replay.probes import data_corruption, optimizer, overflow, rare_tokens
from forensics.replay.probes.base import Session
from forensics.replay.probes.reproduce import hardware, reproduce
from forensics.replay.result import CONFIRMED, INCONCLUSIVE, REFUTED, ReplayResult, write_results
from forensics.replay.sources import Sources
from forensics.replay.state import (
    StateUnavailable,
    advance,
    check_batches,
    clone,
    pick_checkpoint,
    restore,
)
from forensics.replay.verdicts import apply_verdicts
from forensics.sim.data import BatchRecord
from forensics.sim.trainer import TrainState, resolve_device
from forensics.store.db import Store

Progress = Callable[[str], None]
Cache = dict[str, TrainState]  # checkpoint path -> the replayed state furthest along
PROBES: dict[str, Callable[[Session], ReplayResult]] = {
    "rare_tokens": rare_tokens.run,
    "overflow": overflow.run,
    "stale_beta2": optimizer.stale_beta2,
    "lr_too_high": optimizer.lr_too_high,
}


def replay_run(
    store: Store,
    run_id: str,
    *,
    incident_id: int | None = None,
    step: int | None = None,
    device: str = "auto",
    k: int = 20,
    progress: Progress | None = None,
    sources: Sources | None = None,
) -> list[ReplayResult]:
    """Replay the run's incidents (or one), store the `replays` rows, apply the verdicts to
    `findings`/`incidents`, and return the rows. A run without incidents returns []; one
    without any batch source (manifest, shards with loader settings, HF dataset) raises
    ReplayError (no probe could run).

    Which batches: a Hugging Face run (a `checkpoint-N/` folder, or `sources.dataset`) has
    them rebuilt by its own Trainer (hf_replay); a run without a manifest but with token
    shards (`sources.shards`) has them reconstructed from its loader settings (sources.py)."""
    if k < 2:
        raise ReplayError(f"--k must be at least 2 (got {k}): the window needs two steps")
    src = sources or Sources()
    dev = pick_device(device)
    data = load_run(store, run_id)
    incidents = sorted(select_incidents(data, incident_id, step), key=lambda i: i.onset)
    if not data.records and (is_hf_run(data, src) or recorded_batches(store, run_id, src.dataset)):
        return _replay_hf(store, data, incidents, src, dev, k, progress)
    asked = bool(src.shards) or src.batch_size is not None or src.seq_len is not None
    if not data.records and not data.missing_spans and asked:
        # only on request: a guessed loader would silently replay batches the run never saw
        data = _with_loader_records(store, data, src)
    if data.incidents and not data.records and not data.missing_spans:
        from forensics.replay.nanogpt import RANDOM_GET_BATCH, has_nanogpt_checkpoint

        if has_nanogpt_checkpoint(data):
            raise ReplayError(
                f'run "{run_id}" has a nanoGPT ckpt.pt but no batches: {RANDOM_GET_BATCH}'
            )
        raise ReplayError(replayable(store, run_id) or f'run "{run_id}" has no batches')
    out: list[ReplayResult] = []
    cache: Cache = {}
    for inc in incidents:
        if progress is not None:
            progress(f"replaying incident {inc.incident_id} of {run_id} on {dev}")
        rows = replay_incident(data, inc, dev, k, progress, cache, src.judge, src.tokenizer)
        write_results(store, run_id, inc.incident_id, rows)
        out += rows
    apply_verdicts(store, run_id)
    return out


def _replay_hf(
    store: Store,
    data: RunData,
    incidents: list[Incident],
    src: Sources,
    dev: torch.device,
    k: int,
    progress: Progress | None,
) -> list[ReplayResult]:
    from forensics.replay.hf_replay import HFRun, replay_hf_incident

    if progress is not None:
        progress(f"{data.run_id}: rebuilding the Trainer's batches")
    run = HFRun(store, data, src)
    out: list[ReplayResult] = []
    for inc in incidents:
        if progress is not None:
            progress(f"replaying incident {inc.incident_id} of {data.run_id} on {dev} (HF)")
        rows = replay_hf_incident(run, inc, dev, k)
        write_results(store, data.run_id, inc.incident_id, rows)
        out += rows
    apply_verdicts(store, data.run_id)
    return out


def _with_loader_records(store: Store, data: RunData, src: Sources) -> RunData:
    """Reconstruct the batches from the shard loader's settings and store them in `batches`
    (manifest `loader:<kind>`), so that later replays read them like a manifest."""
    import json

    import polars as pl

    from forensics.replay.sources import loader_records, resolve_shards, settings

    shards = resolve_shards(src.shards) if src.shards else _indexed_shards(store, data.run_id)
    if not shards:
        return data
    try:
        st = settings(src, data.config)
    except ReplayError as exc:
        if src.shards:
            raise
        missing = replayable(store, data.run_id) or "no batch manifest"
        raise ReplayError(
            f"{missing}; the run's token shards could be read in order: {exc}"
        ) from exc
    last = max(data.steps_logged("loss"), default=0)
    records = loader_records(shards, st, last)
    rows = [
        (data.run_id, r.step, r.source, r.micro, None, r.token_offset, r.n_tokens, r.seq_len,
         json.dumps({"batch_size": r.batch_size, "loader": st.loader}), f"loader:{st.loader}")
        for recs in records.values() for r in recs
    ]  # fmt: skip
    cols = ["run_id", "step", "source", "micro", "sample_index", "token_offset", "n_tokens",
            "seq_len", "extra", "manifest"]  # fmt: skip
    store.insert_frame("batches", pl.DataFrame(rows, schema=cols, orient="row"))
    data.records = records
    return data


def pick_device(name: str) -> torch.device:
    if name not in ("auto", "cpu") and not name.startswith("cuda"):
        raise ReplayError(f"--device must be auto, cpu or cuda[:i], not {name!r}")
    try:
        return resolve_device(name)
    except SimulationError as exc:
        raise ReplayError(str(exc)) from exc


def replay_incident(
    data: RunData,
    inc: Incident,
    device: torch.device,
    k: int,
    progress: Progress | None = None,
    cache: Cache | None = None,
    judge: bool = True,
    tokenizer: Path | None = None,
) -> list[ReplayResult]:
    s = Session(data, make_plan(data, inc, k), device)
    if not any(c.reference_model for c in data.checkpoints):
        from forensics.replay.nanogpt import nanogpt_checkpoint, replay_nanogpt_incident

        nano = nanogpt_checkpoint(data, s.plan.offending, restore_before(s.plan))
        if nano is not None:
            return replay_nanogpt_incident(s, nano, tokenizer, judge)
    else:
        s.plan = reachable(data, s.plan, lambda p: restorable(data, p))
    results = [data_corruption.run(s)]
    t0 = time.perf_counter()
    try:
        rebuild(s, progress, {} if cache is None else cache)
    except StateUnavailable as exc:
        s.unavailable = str(exc)
    results += [reproduce(s, time.perf_counter() - t0), hardware(s)]
    for name, probe in PROBES.items():
        if progress is not None:
            progress(f"incident {inc.incident_id}: probe {name}")
        results.append(probe(s))
    if s.pre is None and judge:
        if progress is not None:
            progress(f"incident {inc.incident_id}: training the reference judge (tier 2)")
        results.append(judge_batch(s))
    return downgrade(arbitrate(confound(noted(results, s.plan), s)))


def restorable(data: RunData, plan: Plan) -> bool:
    """restore_checkpoint finds a state for `plan` (plan.reachable's test on this path)."""
    try:
        restore_checkpoint(data, plan)
    except StateUnavailable:
        return False
    return True


def judge_batch(s: Session) -> ReplayResult:
    """Tier 2: the bundled model, trained on a sample of the run's shards (an equal share of
    each, the offending step's spans masked out), scores the offending batch against the
    controls."""
    from forensics.replay import judge
    from forensics.replay.freq import train_freq

    why = s.unavailable or "the run's model is not available"
    try:
        off = s.batch(s.plan.offending)
        recs = s.data.records[s.plan.offending]
        stream = shard_sample(s.data, recs)
    except (StateUnavailable, ReplayError, OSError, ValueError) as exc:
        return judge.judge(s.run_id, s.incident_id, None, None, [], None, s.device, f"{exc}")
    freq = train_freq(s.data, recs[0].source)
    return judge.judge(
        s.run_id, s.incident_id, stream, off, s.control_batches(), freq, s.device, why
    )


def shard_sample(data: RunData, masked: list[BatchRecord]) -> np.ndarray:
    """Up to TRAIN_SAMPLE tokens, an equal share from the start of each shard the run read,
    with the spans of `masked` left out."""
    from forensics.replay.freq import TRAIN_SAMPLE
    from forensics.replay.sources import read_tokens

    sources = sorted({r.source for recs in data.records.values() for r in recs})
    share = TRAIN_SAMPLE // max(1, len(sources))
    parts = []
    for src in sources:
        tokens = read_tokens(Path(src))
        keep = np.ones(min(tokens.size, share), dtype=bool)
        for r in masked:
            if r.source == src:
                keep[r.token_offset : r.token_offset + r.n_tokens] = False
        parts.append(np.asarray(tokens[: keep.size], dtype=np.int64)[keep])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def restore_checkpoint(data: RunData, plan: Plan) -> Checkpoint:
    """The checkpoint a replay restores: the latest usable one at or before the window start
    (plan.restore_before says why), else the latest before the offending step (the window
    then starts at it, with fewer steps before the onset)."""
    try:
        return pick_checkpoint(data, restore_before(plan))
    except StateUnavailable:
        return pick_checkpoint(data, plan.offending)


def rebuild(s: Session, progress: Progress | None, cache: Cache) -> None:
    """Restore the checkpoint (restore_checkpoint) and replay the logged steps, keeping the
    probes' snapshots.

    Incidents are replayed in onset order, and the state at the end of one incident's window
    is kept per checkpoint: the next incident that starts from the same checkpoint continues
    from it instead of re-running the same steps (its reproduction check then covers the
    steps from there on; the earlier ones were checked by the earlier incident)."""
    plan, data = s.plan, s.data
    ckpt = restore_checkpoint(data, plan)
    plan.start = max(plan.start, ckpt.step)
    end = plan.offending
    while end < plan.end and end + 1 in data.records:
        end += 1
    plan.end = end
    s.checkpoint_step = ckpt.step
    cached = cache.get(ckpt.path)
    if cached is not None and cached.step <= plan.start:
        check_batches(data, range(cached.step + 1, plan.offending + 1))
        state = clone(cached)
    else:
        check_batches(data, range(ckpt.step + 1, plan.offending + 1))
        state = restore(ckpt, s.device)
    s.resumed_step = state.step
    if progress is not None:
        progress(f"restoring step {state.step}, replaying steps {state.step + 1}-{plan.end}")
    rows = advance(state, data, plan.start)
    s.start = clone(state)
    rows += advance(state, data, plan.offending - 1)
    s.pre = clone(state)
    rows += advance(state, data, plan.end)
    s.rows = {int(r["step"]): r for r in rows}
    cache[ckpt.path] = state


def confound(results: list[ReplayResult], s: Session) -> list[ReplayResult]:
    """An optimizer counterfactual run over batches that the data probe found corrupt cannot
    single out the optimizer (a smaller or better-scaled step shrinks any damage, bad data's
    included): its confirmation becomes inconclusive."""
    by = {r.probe: r for r in results}
    data = by.get("data_corruption")
    if data is None or data.verdict != CONFIRMED:
        return results
    bad = [t for t in data.numbers.get("corrupt_steps", []) if s.plan.start < t <= s.plan.end]
    for name in ("stale_beta2", "lr_too_high"):
        r = by.get(name)
        if r is not None and r.verdict == CONFIRMED and bad:
            r.verdict = INCONCLUSIVE
            r.detail = (
                f"the window holds corrupt batches (steps {bad[0]}-{bad[-1]}): a smaller step "
                f"shrinks their damage too, so this cannot single out the optimizer; "
                f"would be confirmed: {r.detail}"
            )
    return results


def arbitrate(results: list[ReplayResult]) -> list[ReplayResult]:
    """When beta2 = 0.95 alone removes the spike at the run's own learning rate, that LR was
    sustainable: a confirmation of lr_too_high (halving it helps too) is then a refutation."""
    by = {r.probe: r for r in results}
    beta2, lr = by.get("stale_beta2"), by.get("lr_too_high")
    if beta2 is not None and lr is not None and CONFIRMED == beta2.verdict == lr.verdict:
        lr.verdict = REFUTED
        lr.detail = (
            "the beta2 counterfactual removes the spike at the run's own learning rate, so "
            f"that LR is sustainable (halving it helps too: {lr.detail})"
        )
    return results


def downgrade(results: list[ReplayResult]) -> list[ReplayResult]:
    """Probes on an unfaithful state are inconclusive unless the hardware probe explains it
    (or, for the LR counterfactual, the replay drifted off by rounding after the window's
    start, which its verdict already accounts for; or the verdict read no model state)."""
    by = {r.probe: r for r in results}
    repro, hw = by.get("reproduce"), by.get("hardware")
    if repro is None or repro.verdict != REFUTED or (hw is not None and hw.verdict == CONFIRMED):
        return results
    for r in results:
        if r.numbers.get("drift_step") is not None:
            continue  # judged on the drifted replay already (optimizer.decide_lr_drifted)
        if r.numbers.get("state_free"):
            continue  # read from the batch's tokens alone (rare_tokens.no_rare_excess)
        if r.probe in PROBES and r.verdict in (CONFIRMED, REFUTED):
            r.detail = (
                f"replay does not reproduce the logged run ({repro.detail}); "
                f"would be {r.verdict}: {r.detail}"
            )
            r.verdict = INCONCLUSIVE
    return results


def _indexed_shards(store: Store, run_id: str) -> list[Path]:
    """The run's ingested training shards in name order (those named *train*, else all)."""
    frame = store.query("SELECT path FROM token_shards WHERE run_id = ? ORDER BY path", [run_id])
    paths = [Path(p) for p in frame["path"].to_list()] if frame.height else []
    train = [p for p in paths if "train" in p.name.lower()]
    return train or [p for p in paths if "val" not in p.name.lower()]
