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
"""

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
