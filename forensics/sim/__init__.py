"""The bundled reference model and the fault-injecting training simulator.

Public API (what the replay stage builds on):

- `load_checkpoint(path) -> GPT`: the model from a checkpoint file alone.
- `read_checkpoint(path) -> dict`: the raw checkpoint dict (weights_only-safe).
- `resume(run_dir, step, **overrides) -> TrainState`: full training state after `step`
  (model, AdamW, loss scaler, RNG), optionally with changed TrainConfig fields (beta2, peak_lr...).
- `resume_from_checkpoint(path, run_dir=None, **overrides) -> TrainState`: the same from a path.
- `train_steps(state, n, batches=None, faults=(), on_step=None) -> list[dict]`: re-run steps on
  the logged batches (or any `step -> [BatchRecord]` function); returns metric rows.
- `train_step(state, records) -> dict`: one step on the records you choose.
- `batch_from_manifest(run_dir, step, micro=0) -> (x, y)`; `read_manifest(run_dir)`;
  `read_batch(run_dir, record)`.
- `GPT.forward(idx, targets, reduction="none")`: per-token loss (B, T).
- `simulate(scenario, out, ...)`, `simulate_all(out, ...)`: generate runs with ground truth.

Every name loads its module on first use (the model and trainer import torch): a command
that only needs, say, the scenario list or the batch manifest's record type does not pay for
torch through this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forensics.lazy import lazy_exports

if TYPE_CHECKING:
    from forensics.sim.checkpoint import (
        checkpoint_path,
        list_checkpoints,
        load_checkpoint,
        read_checkpoint,
    )
    from forensics.sim.data import BatchRecord, batch_from_manifest, read_batch, read_manifest
    from forensics.sim.model import GPT, GPTConfig, preset
    from forensics.sim.scenarios import SCENARIOS
    from forensics.sim.simulate import SimResult, simulate, simulate_all
    from forensics.sim.trainer import (
        TrainConfig,
        TrainState,
        lr_at,
        resume,
        resume_from_checkpoint,
        save_state,
        seed_everything,
        train_step,
        train_steps,
    )

__all__ = [
    "GPT", "GPTConfig", "preset", "BatchRecord", "batch_from_manifest", "read_batch",
    "read_manifest", "checkpoint_path", "list_checkpoints", "load_checkpoint", "read_checkpoint",
    "SCENARIOS", "SimResult", "simulate", "simulate_all", "TrainConfig", "TrainState", "lr_at",
    "resume", "resume_from_checkpoint", "save_state", "seed_everything", "train_step",
    "train_steps",
]  # fmt: skip
_FROM = {
    "checkpoint_path": "forensics.sim.checkpoint",
    "list_checkpoints": "forensics.sim.checkpoint",
    "load_checkpoint": "forensics.sim.checkpoint",
    "read_checkpoint": "forensics.sim.checkpoint",
    "BatchRecord": "forensics.sim.data",
    "batch_from_manifest": "forensics.sim.data",
    "read_batch": "forensics.sim.data",
    "read_manifest": "forensics.sim.data",
    "GPT": "forensics.sim.model",
    "GPTConfig": "forensics.sim.model",
    "preset": "forensics.sim.model",
    "SCENARIOS": "forensics.sim.scenarios",
    "SimResult": "forensics.sim.simulate",
    "simulate": "forensics.sim.simulate",
    "simulate_all": "forensics.sim.simulate",
    "TrainConfig": "forensics.sim.trainer",
    "TrainState": "forensics.sim.trainer",
    "lr_at": "forensics.sim.trainer",
    "resume": "forensics.sim.trainer",
    "resume_from_checkpoint": "forensics.sim.trainer",
    "save_state": "forensics.sim.trainer",
    "seed_everything": "forensics.sim.trainer",
    "train_step": "forensics.sim.trainer",
    "train_steps": "forensics.sim.trainer",
}

__getattr__ = lazy_exports(__name__, _FROM)
