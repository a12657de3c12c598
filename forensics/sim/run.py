"""Drive a whole training run into a run folder: config.json, metrics.jsonl, batches.jsonl,
checkpoints. Scenarios call `train_run` with their batch overrides and faults."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from forensics.sim.data import MANIFEST, TRAIN_SHARD, BatchRecord
from forensics.sim.trainer import (
    Fault,
    TrainConfig,
    TrainState,
    build_state,
    sampled_batches,
    save_state,
    shard_tokens,
    train_steps,
)

METRICS = "metrics.jsonl"
CONFIG = "config.json"


class RunWriter:
    """Appends one metrics row and the step's batch records per step.

    json.dumps writes NaN/Infinity tokens for non-finite floats: they are evidence, never
    dropped.
    """

    def __init__(self, run_dir: Path) -> None:
        self.metrics: IO[str] = (run_dir / METRICS).open("w")
        self.manifest: IO[str] = (run_dir / MANIFEST).open("w")

    def __call__(self, row: dict[str, Any], records: list[BatchRecord]) -> None:
        self.metrics.write(json.dumps(row) + "\n")
        for rec in records:
            self.manifest.write(rec.to_json() + "\n")

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.metrics.close()
        self.manifest.close()


def write_config(run_dir: Path, cfg: TrainConfig) -> None:
    (run_dir / CONFIG).write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")


def train_run(
    cfg: TrainConfig,
    run_dir: Path,
    overrides: dict[int, list[BatchRecord]] | None = None,
    faults: Sequence[Fault] = (),
    progress: Callable[[int], None] | None = None,
) -> tuple[TrainState, list[dict[str, Any]]]:
    """Train cfg.total_steps steps from scratch; the data shard must already be in run_dir."""
    run_dir = Path(run_dir)
    write_config(run_dir, cfg)
    state = build_state(cfg, run_dir)
    batches = sampled_batches(cfg, shard_tokens(run_dir, TRAIN_SHARD), overrides)
    ckpts = set(cfg.ckpt_steps)
    rows: list[dict[str, Any]] = []
    with RunWriter(run_dir) as writer:
        for _ in range(cfg.total_steps):
            rows += train_steps(state, 1, batches, faults, on_step=writer)
            if state.step in ckpts:
                save_state(state)
            if progress is not None:
                progress(state.step)
    return state, rows


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of a run's metrics.jsonl (NaN/Infinity tokens come back as floats)."""
    with (Path(run_dir) / METRICS).open() as f:
        return [json.loads(line) for line in f if line.strip()]
