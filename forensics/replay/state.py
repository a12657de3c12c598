"""Rebuild a run's training state from a checkpoint file and step it on the logged batches.

An adapter over `forensics.sim.trainer`: the simulator's `resume(run_dir, step)` assumes its
own folder layout, while replay takes checkpoint paths and batch records from the store. So
this restores from any checkpoint path with the same overrides (beta2, peak_lr, device...) and
steps through `train_step` with the manifest's records, which is what makes a CPU replay
reproduce the logged loss bit for bit.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from forensics.errors import ReplayError, SimulationError
from forensics.replay.context import Checkpoint, RunData
from forensics.sim import checkpoint as ckpt_io
from forensics.sim.data import BatchRecord
from forensics.sim.trainer import Fault, TrainState, state_from_checkpoint, train_step

StepRow = dict[str, Any]


class StateUnavailable(Exception):
    """The training state cannot be rebuilt; the message says why (stored as a probe detail)."""


def usable(c: Checkpoint) -> bool:
    """Replay can restore it and re-run steps: the reference model, with optimizer state."""
    return c.has_optimizer and c.reference_model


def pick_checkpoint(data: RunData, before: int) -> Checkpoint:
    """The latest checkpoint strictly before `before` that replay can restore.

    A checkpoint saved after step c holds the state the run had when it started step c + 1,
    so the state at the offending step needs c < offending.
    """
    older = [c for c in data.checkpoints if c.step < before]
    if not older:
        have = ", ".join(str(c.step) for c in data.checkpoints) or "none"
        raise StateUnavailable(f"no checkpoint before step {before} (checkpoints at: {have})")
    ok = [c for c in older if usable(c)]
    if ok:
        return ok[-1]
    last = older[-1]
    if not last.reference_model:
        arch = last.arch or "unknown"
        raise StateUnavailable(
            f"checkpoint of step {last.step} is not the reference model "
            f"(arch {arch!r}, replay needs 'forensics-gpt')"
        )
    raise StateUnavailable(
        f"checkpoint of step {last.step} has no optimizer state (replay needs Adam's moments "
        "to re-run training steps)"
    )


def restore(ckpt: Checkpoint, device: torch.device, **overrides: Any) -> TrainState:
    """The full training state saved in `ckpt`, with TrainConfig fields overridden."""
    try:
        raw = ckpt_io.read_checkpoint(Path(ckpt.path))
    except SimulationError as exc:
        raise StateUnavailable(str(exc)) from exc
    if not raw.get("optimizer") or not raw.get("train_config"):
        raise StateUnavailable(f"{ckpt.path}: no optimizer state / train_config in the checkpoint")
    # log_layers_every=0: layer stats are a separate no-grad forward, never part of the numerics.
    overrides = {"device": str(device), "log_layers_every": 0} | overrides
    return state_from_checkpoint(raw, Path(ckpt.path).parent, **overrides)


def set_hparams(state: TrainState, **changes: Any) -> TrainState:
    """Change config fields of a live state; beta2 also goes into the optimizer's groups."""
    state.cfg = replace(state.cfg, **changes)
    for group in state.optimizer.param_groups:
        group["betas"] = (state.cfg.beta1, state.cfg.beta2)
        group["eps"] = state.cfg.eps
    return state


def clone(state: TrainState) -> TrainState:
    """An independent copy (model, optimizer moments, scaler) to branch a counterfactual from."""
    return copy.deepcopy(state)


def advance(
    state: TrainState,
    data: RunData,
    until: int,
    faults: Sequence[Fault] = (),
    on_step: Callable[[StepRow], None] | None = None,
    substitute: Mapping[int, int] | None = None,
) -> list[StepRow]:
    """Run the logged steps state.step + 1 .. until; returns their metric rows. A step in
    `substitute` trains the batch logged at the step it maps to instead of its own."""
    rows: list[StepRow] = []
    substitute = substitute or {}
    while state.step < until:
        records = batch_records(data, substitute.get(state.step + 1, state.step + 1))
        try:
            row = train_step(state, records, faults)
        except SimulationError as exc:  # a shard named by the manifest is missing or short
            raise StateUnavailable(str(exc)) from exc
        rows.append(row)
        if on_step is not None:
            on_step(row)
    return rows


def batch_records(data: RunData, step: int) -> list[BatchRecord]:
    if step not in data.records:
        why = data.missing_spans.get(step, f"the batch manifest has no record for step {step}")
        raise StateUnavailable(why)
    return data.records[step]


def load_batch(
    data: RunData, step: int, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """(x, y, input_scale) of each micro-batch of a step, read from its token shard."""
    out = []
    for rec in batch_records(data, step):
        x, y = read_span(rec)
        out.append((x.to(device), y.to(device), rec.input_scale))
    return out


def check_batches(data: RunData, steps: range | list[int]) -> None:
    """Fail early (StateUnavailable) if any step's batch cannot be read."""
    for step in steps:
        load_batch(data, step, torch.device("cpu"))


def shard_of(rec: BatchRecord) -> np.ndarray:
    """The tokens of the shard a manifest record names; a missing or unreadable shard is
    StateUnavailable (the probe says so and the others still run)."""
    from forensics.replay.sources import read_tokens

    path = Path(rec.source)
    if not path.is_file():
        raise StateUnavailable(f"{path}: token shard named by the manifest is missing")
    try:
        return read_tokens(path)
    except (ReplayError, OSError, ValueError) as exc:
        raise StateUnavailable(str(exc)) from exc


def read_span(rec: BatchRecord) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) int64 (batch_size, seq_len) of one record, from any shard format replay reads
    (llm.c v1/v2 header, headerless uint16, .npy)."""
    path, tokens = Path(rec.source), shard_of(rec)
    end = rec.token_offset + rec.n_tokens
    if rec.n_tokens != rec.batch_size * rec.seq_len + 1 or end > tokens.size:
        raise StateUnavailable(
            f"{path}: batch of step {rec.step} (offset {rec.token_offset}, {rec.n_tokens} "
            f"tokens) does not fit the shard of {tokens.size} tokens"
        )
    span = torch.from_numpy(np.asarray(tokens[rec.token_offset : end], dtype=np.int64))
    return span[:-1].view(rec.batch_size, rec.seq_len), span[1:].view(rec.batch_size, rec.seq_len)
