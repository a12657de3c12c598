"""Builders for the replay tests: a tiny simulated run with a rare-token batch, incidents.

A 2-layer, 32-wide model trained 45 steps (a few seconds on a CPU), checkpoints after steps
20 and 40, and at step 35 a batch of ids from the language's rare band.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from forensics.sim.data import INJECT_SHARD, BatchRecord, prepare_data, write_shard
from forensics.sim.model import GPTConfig
from forensics.sim.run import train_run
from forensics.sim.trainer import TrainConfig
from forensics.store import Store

RUN = "tiny"
RARE_STEP = 35
B, T, V = 4, 32, 256


def tiny_config(**overrides: object) -> TrainConfig:
    model = GPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=2, n_embd=32)
    base: dict[str, object] = {
        "model": model, "total_steps": 45, "batch_size": B, "seq_len": T, "warmup_steps": 5,
        "ckpt_steps": [20, 40], "log_layers_every": 0, "device": "cpu", "data_tokens": 32768,
    }  # fmt: skip
    return TrainConfig(**(base | overrides))  # type: ignore[arg-type]


def build_run(run_dir: Path) -> Path:
    lang = prepare_data(run_dir, V, 32768, 7)
    rare = np.random.default_rng(0).integers(lang.rare_start, V, B * T + 1)
    write_shard(run_dir / INJECT_SHARD, rare.astype(np.uint16))
    rec = BatchRecord(RARE_STEP, 0, INJECT_SHARD, 0, B * T + 1, T, B)
    train_run(tiny_config(), run_dir, {RARE_STEP: [rec]})
    return run_dir


def add_incident(
    store: Store,
    incident_id: int,
    onset: int,
    cause: str,
    confidence: float,
    findings: list[tuple[str, str, bool, float]],
    peak: int | None = None,
) -> None:
    """An incidents row and its findings, as detection would write them."""
    store.con.execute(
        "INSERT INTO incidents (run_id, incident_id, metric, onset_step, peak_step, end_step, "
        "cause, confidence, recovery, evidence) VALUES (?, ?, 'loss', ?, ?, ?, ?, ?, 'continue', "
        "'[]')",
        [RUN, incident_id, onset, peak or onset, (peak or onset) + 1, cause, confidence],
    )
    for rule, fcause, triggered, conf in findings:
        store.con.execute(
            "INSERT INTO findings VALUES (?, ?, ?, ?, ?, ?, ?, '[]', 'not_run')",
            [RUN, incident_id, rule, fcause, triggered, conf, f"recover-{fcause}"],
        )


FINDINGS = [
    ("data-garbage", "data_corruption", True, 0.8),
    ("rare", "rare_tokens", False, 0.0),
    ("beta2", "stale_beta2", False, 0.0),
    ("lr", "lr_too_high", True, 0.3),
]
